"""Host functions that launch kernels (`launch_jacobi_kernel(a_new, a, ...)` in another file around
`jacobi_kernel<32, 32><<<grid, {32, 32, 1}, 0, stream>>>(a_new, a, ...)`): each is summarised by the
launches it makes and, per parameter, what those kernels read and write, so a call to it is a kernel
launch of the caller's arguments. Wrappers calling wrappers compose."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import api
from .source import call_args, call_name, declarator_name, function_declarator, identifiers, kernel_config

MAX_DEPTH = 8


@dataclass
class Launch:
    kernel: str
    at: str  # file:line of the <<<...>>> inside the wrapper
    config: dict  # grid, block, shared_bytes, stream as written there
    args: list[str] = field(default_factory=list)


@dataclass
class Wrapper:
    name: str
    at: str
    params: list[str]  # parameter names, in order
    access: list[str]  # per parameter: "r" | "w" | "rw" | ""
    launches: list[Launch] = field(default_factory=list)

    def config_for(self, caller_args: list[str]) -> list[dict]:
        """Each launch's configuration, a parameter written as the caller's argument (the stream)."""
        bind = dict(zip(self.params, caller_args))
        out = []
        for launch in self.launches:
            cfg = {k: (bind.get(v, v) if v is not None else None) for k, v in launch.config.items()}
            out.append({"kernel": launch.kernel, "at": launch.at, **cfg})
        return out


def find_wrappers(functions: dict, kernels: dict, kernel_access: dict) -> dict[str, Wrapper]:
    """Every host function (not main, not a kernel, no NCCL call of its own) that launches a kernel,
    directly or through another wrapper."""
    found: dict[str, Wrapper | None] = {}

    def summarise(name: str, depth: int) -> Wrapper | None:
        if name in found:
            return found[name]
        found[name] = None  # a recursive call is not followed
        src, fn = functions[name]
        if name == "main" or name in kernels or depth > MAX_DEPTH:
            return None
        calls = src.nodes("call_expression", fn)
        if any(call_name(c, src) in api.NCCL_COMM for c in calls):
            return None
        params, pointers = param_names(src, fn)
        access = {p: "" for p in params}
        launches: list[Launch] = []
        for c in calls:
            cname = call_name(c, src)
            cfg = kernel_config(c)
            args = call_args(c)
            if cfg is not None:
                parts = [src.text(x) for x in cfg.named_children if x.type != "comment"]
                parts += [None] * (4 - len(parts))
                launches.append(
                    Launch(
                        cname or src.text(c.child_by_field_name("function")),
                        src.at(c),
                        dict(zip(("grid", "block", "shared_bytes", "stream"), parts[:4])),
                        [src.text(a) for a in args],
                    )
                )
                inner = kernel_access.get(cname) or ["rw"] * len(args)
            elif (
                cname is not None
                and cname in functions
                and cname != name
                and (w := summarise(cname, depth + 1)) is not None
            ):
                launches.extend(w.launches)
                inner = w.access
            else:
                continue
            for arg, acc in zip(args, inner):
                for i in identifiers(arg):
                    p = src.text(i)
                    if p in pointers and acc:
                        access[p] = "".join(ch for ch in "rw" if ch in access[p] + acc)
        if not launches:
            return None
        found[name] = Wrapper(name, src.at(fn), params, [access[p] for p in params], launches)
        return found[name]

    for name in list(functions):
        summarise(name, 0)
    return {n: w for n, w in found.items() if w is not None}


def param_names(src, fn) -> tuple[list[str], set[str]]:
    decl = function_declarator(fn)
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    names, pointers = [], set()
    for p in plist.named_children if plist is not None else []:
        d = p.child_by_field_name("declarator")
        name = declarator_name(d, src) if d is not None else None
        names.append(name or "")
        if name and d.type in ("pointer_declarator", "array_declarator", "reference_declarator"):
            pointers.add(name)
    return names, pointers
