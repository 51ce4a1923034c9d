"""ringvit: decode, tokenize and embed recordings in-process with libringvit, as
NumPy arrays Python owns.

    import ringvit
    info = ringvit.probe("talk.mp4")                       # `ringvit probe --json`
    frames, times, source_times = ringvit.frames("talk.mp4", fps=1, size=224)
    for chunk in ringvit.iter_frames("long.mp4", fps=1):   # bounded memory
        ...
    wave = ringvit.audio("talk.mp4")                       # float32, 16 kHz mono
    toks = ringvit.tokens("talk.mp4", model="tiny")        # `ringvit tokens -o`
    with ringvit.Encoder("tiny", cp=2) as enc:             # `ringvit embed`
        emb = enc.embed("talk.mp4")                        # emb["global"], emb["segments"]
    rows = ringvit.labels("talk.safetensors", top=3)       # `ringvit labels`

Library failures raise ringvit.Error (a RuntimeError) with the library's
message; bad arguments raise ValueError or TypeError before any C call. Long
calls release the GIL, and Ctrl-C interrupts them cleanly. The library is found
through RINGVIT_LIB, the build tree, the install prefix or the loader's path."""

from ._arrays import Arrays, bf16_to_f32
from ._version import __version__
from .encoder import Encoder
from .errors import Error, LibraryNotFoundError
from .info import build_info, library_path
from .labels import labels
from .media import Frames, audio, frames, iter_frames, probe
from .tokens import tokens

__all__ = ["Arrays", "Encoder", "Error", "Frames", "LibraryNotFoundError", "__version__",
           "audio", "bf16_to_f32", "build_info", "frames", "iter_frames", "labels",
           "library_path", "probe", "tokens"]
