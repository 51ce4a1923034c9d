/* main.c: PLACEHOLDER entry of the ringvit command (being written now). */
#include <stdio.h>
int main(void) { puts("ringvit"); return 0; }
