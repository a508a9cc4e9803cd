"""Local file helpers for the client-compatibility tests."""

import hashlib
import os
import random
from pathlib import Path


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def random_bytes(n: int, seed) -> bytes:
    return random.Random(seed).randbytes(n)


def make_tree(root: Path, files: dict) -> dict:
    """Writes {relative posix path: size} under root with seeded random content.
    Returns {relative path: sha256}."""
    digests = {}
    for rel, size in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        data = random_bytes(size, rel)
        p.write_bytes(data)
        digests[rel] = hashlib.sha256(data).hexdigest()
    return digests


def tree_digests(root: Path) -> dict:
    """{relative posix path: sha256} of every regular file under root."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out
