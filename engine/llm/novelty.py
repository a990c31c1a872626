"""Is a child new enough? A local measure by default (Jaccard similarity of token shingles of the
EVOLVE-BLOCK bodies, comments and whitespace ignored), or cosine similarity of embeddings from an
OpenAI-compatible `/embeddings` endpoint when one is configured."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from .. import blocks

_TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|\S")
_COMMENT_RE = re.compile(r"//(?!\s*cuco:).*?$|/\*.*?\*/", re.DOTALL | re.MULTILINE)
SHINGLE = 3


def block_text(source: str) -> str:
    try:
        return "\n".join(b.body for b in blocks.parse_blocks(source)) or source
    except blocks.BlockError:
        return source


def shingles(source: str, k: int = SHINGLE) -> set[tuple[str, ...]]:
    tokens = _TOKEN_RE.findall(_COMMENT_RE.sub(" ", block_text(source)))
    if len(tokens) < k:
        return {tuple(tokens)}
    return {tuple(tokens[i : i + k]) for i in range(len(tokens) - k + 1)}


def jaccard(a: set, b: set) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def cosine(a: list[float], b: list[float]) -> float:
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return sum(x * y for x, y in zip(a, b)) / (na * nb)


class NoveltyCheck(Protocol):
    threshold: float

    async def max_similarity(self, child: str, others: list[str]) -> float: ...


@dataclass
class ShingleNovelty:
    """Jaccard similarity of 3-token shingles; a child at or above `threshold` to any other is a repeat."""

    threshold: float = 0.99

    async def max_similarity(self, child: str, others: list[str]) -> float:
        mine = shingles(child)
        return max((jaccard(mine, shingles(o)) for o in others), default=0.0)


Embedder = Callable[[list[str]], Awaitable[list[list[float]]]]


@dataclass
class EmbeddingNovelty:
    """Cosine similarity of code embeddings (cached by text); `embed` calls the `/embeddings` endpoint."""

    embed: Embedder
    threshold: float = 0.995
    cache_size: int = 512
    _cache: OrderedDict[str, list[float]] = field(default_factory=OrderedDict)

    async def _vectors(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            for t, v in zip(missing, await self.embed(missing)):
                self._cache[t] = v
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return [self._cache[t] if t in self._cache else (await self.embed([t]))[0] for t in texts]

    async def max_similarity(self, child: str, others: list[str]) -> float:
        if not others:
            return 0.0
        texts = [block_text(child)] + [block_text(o) for o in others]
        vectors = await self._vectors(texts)
        return max(cosine(vectors[0], v) for v in vectors[1:])
