"""Communicator knobs: the program's ncclCommInitRank becomes ncclCommInitRankConfig with a ncclConfig_t
(CTAs the communicator's kernels may use), and the protocol is set through NCCL_PROTO before the
communicator is made (a value the user already exported wins).

Precondition: one ncclCommInitRank call in the region's file, as a statement of its own."""

from __future__ import annotations

from .base import Edit, Offer, Refusal, RewriteError, Rewritten
from .facts import Call, ScheduleFacts

NAME = "comm_config"
CTAS = ("default", "1", "2", "4", "8", "16", "32", "64")
PROTOCOLS = ("default", "Simple", "LL", "LL128")


def _single_init(facts: ScheduleFacts) -> tuple[Call, tuple[int, int]] | str:
    """The one ncclCommInitRank call and its statement's span, or why the rewrite cannot take it."""
    inits = [c for c in facts.calls if c.name.startswith("ncclCommInit")]
    if not inits:
        return "the file makes no communicator (ncclCommInitRank)"
    if facts.comm_init is None:
        return (
            f"{facts.path}:{inits[0].line}: {inits[0].name}; only a single ncclCommInitRank is rewritten "
            "(a config is already given, or there are several communicators)"
        )
    if len(facts.comm_init.args) != 4 or facts.comm_init_stmt is None:
        return f"{facts.path}:{facts.comm_init.line}: ncclCommInitRank is not a statement of its own"
    return facts.comm_init, facts.comm_init_stmt


class CommConfig:
    name = NAME
    summary = "set the communicator's CTAs (ncclConfig_t) and protocol (NCCL_PROTO)"

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        found = _single_init(facts)
        if isinstance(found, str):
            return Refusal(NAME, found)
        init, _ = found
        return Offer(
            NAME,
            f"ncclCommInitRank at {facts.path}:{init.line} with a ncclConfig_t",
            knobs={"comm_ctas": CTAS, "nccl_proto": PROTOCOLS},
        )

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        found = _single_init(facts)
        if isinstance(found, str):
            raise RewriteError(f"{NAME}: {found}")
        ctas, proto = knobs.get("comm_ctas", "default"), knobs.get("nccl_proto", "default")
        if ctas not in CTAS or proto not in PROTOCOLS:
            raise RewriteError(f"{NAME}: comm_ctas must be one of {CTAS}, nccl_proto one of {PROTOCOLS}")
        init, (start, _) = found
        line_start = facts.text.rfind(b"\n", 0, start) + 1
        ind = facts.text[line_start:start].decode()
        lines = [
            f"// cuco rewrite {NAME}: communicator knobs (comm_ctas={ctas}, nccl_proto={proto})",
            "ncclConfig_t cuco_config = NCCL_CONFIG_INITIALIZER;",
        ]
        if ctas != "default":
            lines += [f"cuco_config.minCTAs = {ctas};", f"cuco_config.maxCTAs = {ctas};"]
        if proto != "default":
            lines.append(f'setenv("NCCL_PROTO", "{proto}", 0);   // an NCCL_PROTO already exported wins')
        pre = "".join(f"{line}\n{ind}" for line in lines)
        args = ", ".join(a.text for a in init.args)
        edits = [
            Edit(facts.path, start, start, pre),
            Edit(facts.path, init.start, init.end, f"ncclCommInitRankConfig({args}, &cuco_config)"),
        ]
        if proto != "default" and b"<cstdlib>" not in facts.text and b"<stdlib.h>" not in facts.text:
            at = facts.text.find(b"#include")
            at = 0 if at < 0 else facts.text.find(b"\n", at) + 1
            edits.append(Edit(facts.path, at, at, "#include <cstdlib>\n"))
        note = (
            f"{NAME}: ncclCommInitRank ({facts.path}:{init.line}) now ncclCommInitRankConfig with "
            f"minCTAs = maxCTAs = {ctas}"
            + (f", NCCL_PROTO={proto} unless already set" if proto != "default" else "")
            + (" (CTAs left to NCCL)" if ctas == "default" else "")
        )
        return Rewritten([], note, program_only=edits)
