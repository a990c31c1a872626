"""Uploads by content hash: one node's blob cache (`<workdir>/blobs/<sha256>`).

A blob the node already has (listed when the node was first connected, or uploaded since) is never sent
again; two jobs needing the same new blob share one upload.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .jobs import content_hash
from .remote_job import upload_script
from .ssh_pool import out_text

if TYPE_CHECKING:
    from .ssh_pool import SSHPool


class BlobUploadError(Exception):
    pass


class BlobCache:
    def __init__(self, pool: SSHPool, work_dir: str, known: Iterable[str] = ()):
        self.pool = pool
        self.work_dir = work_dir
        self.known: set[str] = set(known)
        self._inflight: dict[str, asyncio.Future[None]] = {}
        self.uploads = 0  # blobs actually sent (tests assert on it)
        self.bytes_sent = 0

    def forget(self, shas: Iterable[str]) -> None:
        """The node lost these blobs (e.g. someone cleaned the cache): upload them again next time."""
        self.known.difference_update(shas)

    async def ensure(self, files: Mapping[str, bytes]) -> dict[str, str]:
        """Make every file's blob present on the node; return relative path -> sha256."""
        by_sha: dict[str, bytes] = {}
        paths: dict[str, str] = {}
        for rel, data in files.items():
            sha = content_hash(data)
            paths[rel] = sha
            by_sha.setdefault(sha, data)
        missing = [sha for sha in by_sha if sha not in self.known]
        if missing:
            await asyncio.gather(*(self._upload_once(sha, by_sha[sha]) for sha in missing))
        return paths

    async def _upload_once(self, sha: str, data: bytes) -> None:
        fut = self._inflight.get(sha)
        if fut is None:
            fut = asyncio.ensure_future(self._upload(sha, data))
            self._inflight[sha] = fut
            fut.add_done_callback(lambda _f: self._inflight.pop(sha, None))
        await asyncio.shield(fut)

    async def _upload(self, sha: str, data: bytes) -> None:
        if sha in self.known:
            return
        timeout = 60.0 + len(data) / 1_000_000  # at least 1 MB/s
        res = await self.pool.run(upload_script(self.work_dir, sha), input=data, timeout=timeout, binary=True)
        if res.exit_status != 0:
            err = out_text(res.stderr).strip()
            raise BlobUploadError(f"{self.pool.name}: upload of blob {sha[:12]} failed: {err or res.exit_status}")
        self.known.add(sha)
        self.uploads += 1
        self.bytes_sent += len(data)
