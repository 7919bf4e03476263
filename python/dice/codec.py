"""dice's value codec: what Python sends without pickle.

None, bool, int (64-bit), float, str, bytes, list, tuple, dict with str keys,
numpy arrays and torch tensors (float16/32/64, bfloat16 tensors, int8/16/32/64,
uint8, bool), nested up to 64 levels. Anything else raises TypeError naming
where it sits (``trajectories[3]['obs']``). Arrays are copied once into the
encoding and decoded as views of it (no copy); tensors lose requires_grad and
come back on the CPU.
"""

from ._core import Encoded, decode, encode, rejected_count

__all__ = ["Encoded", "encode", "decode", "rejected_count"]
