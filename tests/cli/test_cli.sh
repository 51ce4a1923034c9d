#!/bin/sh
# PLACEHOLDER (being written now)
"$1" >/dev/null
