"""tokens.py: ringvit.tokens, a recording's whole token sequence for a model's
tokenizer, the tensors and metadata `ringvit tokens -o` writes (rv_flat_tokens)."""

from . import _arrays, _call, _lib, _options


def tokens(path, model="tiny", *, fps=1, size=None, start=None, duration=None, pad=False,
           video=True, audio=True, attention=None, cp=1, shard="contiguous", threads=None,
           max_corrupt=None):
    """The token sequence of path as the tokenizer of model (a folder, a weights
    file or a preset name) makes it: an Arrays (dict of NumPy arrays, .meta the
    metadata) with video_patches, audio_fbank, audio_patches, token_modality,
    token_pos, token_time, token_window, as `ringvit tokens` writes them. size
    defaults to the model's frame side; video/audio=False leave a modality out;
    attention ("block=S", "frame", ...) makes the tokens of an Encoder with that
    span (its blocks); cp and shard ("contiguous", "zigzag") shape the shard
    report in .meta["tokens"]. .meta holds what the command's file does: format,
    time_origin, probe, tokens (the report), and the layout Encoder.embed needs."""
    p = _options.path_bytes(path)
    o = _options.reader(fps, size, start, duration, pad, video, audio, threads, max_corrupt)
    o["model"] = _options.model(model)
    o["cp"] = _options.cp(cp)
    if attention is not None:
        o["attention"] = _options.attention(attention)
    if shard not in _options.SHARDS:
        raise ValueError(f"shard must be one of {_options.SHARDS}, got {shard!r}")
    if shard != "contiguous":
        o["shard"] = shard
    opts = _options.dumps(o)
    lib = _lib.load()
    h = _call.run(lambda: _call.out_call(lib.rv_flat_tokens, p, opts), free=_arrays.free)
    return _arrays.take(h)
