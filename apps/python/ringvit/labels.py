"""labels.py: ringvit.labels, the top labels of an embed output's classifier with
their probabilities, per block or for the recording: what `ringvit labels`
prints (rv_flat_labels)."""

from . import _arrays, _call, _lib, _options

LEVELS = ("block", "recording")


def labels(path, top=5, *, multi_label=None, level=None):
    """The ranked labels of the embed output at path (a file `ringvit embed`
    wrote with a model that has a classifier head): a list with one dict per
    block (when the file holds block_logits), else one for the recording:
    {"start": s, "end": s, "labels": [(label, p), ...]} with the top labels by
    decreasing probability (times on the file's clock, the container's).
    Probabilities are the softmax of the logits, or each logit's sigmoid when the
    classes are independent: the file's multi_label unless multi_label
    (True: sigmoid, False: softmax) says otherwise. level: "block" or
    "recording" (default: block when the file has blocks)."""
    p = _options.path_bytes(path)
    o = {"top": _options._int("top", top, 1, 1 << 20)}
    if multi_label is not None:
        o["multi_label"] = _options._bool("multi_label", multi_label)
    if level is not None:
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        o["level"] = level
    opts = _options.dumps(o)
    lib = _lib.load()
    h = _call.run(lambda: _call.out_call(lib.rv_flat_labels, p, opts), free=_arrays.free)
    a = _arrays.take(h)
    names = a.meta["labels"]
    return [{"start": float(a["start"][r]), "end": float(a["end"][r]),
             "labels": [(names[int(i)], float(q)) for i, q in zip(a["index"][r], a["prob"][r])]}
            for r in range(a["index"].shape[0])]
