"""Content-addressed files beside the database: sources, logs, binaries."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


class BlobStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._written: set[str] = set()  # digests known to be on disk (skips a stat per put)
        self._dirs: set[str] = set()  # shard folders known to exist (skips a mkdir per put)

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._written:
            return digest
        dest = self.path(digest)
        if digest[:2] not in self._dirs:
            dest.parent.mkdir(parents=True, exist_ok=True)
            self._dirs.add(digest[:2])
        if not dest.exists():
            tmp = dest.with_name(f".{digest}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, dest)  # atomic: a reader never sees half a blob
        self._written.add(digest)
        return digest

    def put_text(self, text: str) -> str:
        return self.put(text.encode("utf-8"))

    def get(self, digest: str) -> bytes:
        return self.path(digest).read_bytes()

    def get_text(self, digest: str) -> str:
        return self.get(digest).decode("utf-8", errors="replace")

    def has(self, digest: str) -> bool:
        return self.path(digest).exists()
