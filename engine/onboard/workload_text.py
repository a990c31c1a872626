"""The text of the files `cuco init` writes: candidate.cu, baseline.cu, problem.cu and workload.yaml."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from . import api
from .design import design_space, seed_annotation, seed_knob_lines
from .source import names_in, walk

ELEM_CANON = {"half": "__half", "nv_bfloat16": "__nv_bfloat16"}
STD_INCLUDES = [
    "#include <cuda_runtime.h>",
    "#include <nccl.h>",
    "#include <cstdio>",
    "#include <cstdlib>",
    "#include <cstring>",
]


def _indent(lines, n=4) -> str:
    pad = " " * n
    return "\n".join(pad + line if line.strip() else "" for line in lines)


def _check_macro_defs(top) -> list[str]:
    """The program's checking macros (NCCLCHECK(cmd), ...) re-defined to hand the error to the harness
    (ctx->error, a non-zero return) instead of aborting the process."""
    # a check function's further arguments (`check(cudaMalloc(...), "what")`) are accepted and not used:
    # the status is the first
    return [
        "#define CUCO_FIRST_(cmd, ...) cmd",
        "#define CUCO_FIRST(...) CUCO_FIRST_(__VA_ARGS__, 0)",
        "#define CUCO_UNCHECKED(...) ((void)(__VA_ARGS__))",
    ] + [
        f"#define {m}(...) do {{ auto cuco_r_ = (CUCO_FIRST(__VA_ARGS__)); if ((int)cuco_r_ != 0) {{ "
        f'snprintf(cuco_c->error, sizeof cuco_c->error, "%s failed (%d)", #__VA_ARGS__, (int)cuco_r_); '
        "return 1; } } while (0)"
        for m in top.check_macros
    ]


def _head(prog, top, text, title: str) -> list[str]:
    files = ", ".join(prog.files)
    lines = [f"// {title}", f"// Made by `cuco init` from {files}.", '#include "cuco_abi.h"']
    lines += [i for i in STD_INCLUDES if i not in top.includes] + top.includes
    lines += top.macros + _check_macro_defs(top) + text.defines
    return lines


def _split_at_pragmas(items: list[str]) -> tuple[list[str], list[str]]:
    """The device code up to its last item with a `#pragma` (kept as the user wrote it, in order, outside
    the evolvable block), and the rest."""
    last = max(
        (i for i, t in enumerate(items) if any(line.lstrip().startswith("#") for line in t.splitlines())), default=-1
    )
    return items[: last + 1], items[last + 1 :]


def _struct(text, extra: bool) -> list[str]:
    lines = ["struct Program {"]
    lines += ["  " + m for m in text.members]
    lines += ["", "  int setup() {", _indent(text.setup), "    return 0;", "  }"]
    lines += [
        "",
        "  // one iteration of the program's repeated region",
        "  int run() {" + text.run.rstrip(),
        "    return 0;",
        "  }",
    ]
    if extra and text.start:
        lines += [
            "",
            "  // the carried buffers' starting value: the harness calls this before every call, untimed",
            "  int start_outputs() {" + text.start.rstrip(),
            "    return 0;",
            "  }",
        ]
    if extra:
        lines += [
            "",
            "  // the region without its collectives (the overlap bound's compute-only time)",
            "  int run_compute() {" + text.run_compute.rstrip(),
            "    return 0;",
            "  }",
            "",
            "  // the region without its kernels (the overlap bound's communication-only time)",
            "  int run_comm() {" + text.run_comm.rstrip(),
            "    return 0;",
            "  }",
        ]
    lines += ["", "  int teardown() {", _indent(text.teardown), "    return 0;", "  }", "};"]
    return lines


def candidate(prog, text, top, name: str, extra_code: Sequence[str] = ()) -> str:
    lines = _head(
        prog,
        top,
        text,
        f"candidate.cu of workload {name}: the program's kernels and its repeated region "
        "behind the harness ABI (cuco_abi.h).",
    )
    lines += [
        "// Only the EVOLVE-BLOCKs change; the harness calls the cuco_candidate_* functions at the bottom.",
        f"// Inputs: {', '.join(f'ctx->inputs[{i}] = {b}' for i, b in enumerate(_names(prog, 'input'))) or 'none'}; "
        f"outputs: {', '.join(f'ctx->outputs[{i}] = {b}' for i, b in enumerate(_names(prog, 'output')))}.",
        "// Both are NCCL symmetric windows (ctx->inputs[i].win); the program's other buffers are its own.",
        "",
        "namespace {",
    ]
    frozen, evolving = _split_at_pragmas(top.device_code)
    if frozen:
        lines += [
            "// Frozen: code with #pragma (a directive may not sit inside an EVOLVE-BLOCK) and what",
            "// precedes it; the search writes new kernels in the block below instead of editing these.",
        ]
        lines += frozen
    lines += ["// EVOLVE-BLOCK-START kernels"]
    lines += evolving + list(extra_code)
    lines += ["// EVOLVE-BLOCK-END", "", "// EVOLVE-BLOCK-START schedule", seed_annotation(prog)]
    lines += seed_knob_lines()
    lines += _struct(text, extra=False)
    lines += [
        "",
        "static int impl_setup(cuco_ctx* ctx) { Program* p = new Program(); p->cuco_c = ctx; ctx->state = p; return p->setup(); }",
        "static int impl_run(cuco_ctx* ctx) { Program* p = (Program*)ctx->state; p->cuco_c = ctx; return p->run(); }",
        "static int impl_teardown(cuco_ctx* ctx) {",
        "  Program* p = (Program*)ctx->state;",
        "  int rc = p ? (p->cuco_c = ctx, p->teardown()) : 0;",
        "  delete p;",
        "  ctx->state = nullptr;",
        "  return rc;",
        "}",
        "// EVOLVE-BLOCK-END",
        "}  // namespace",
        "",
        'extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }',
        'extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }',
        'extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }',
        "",
    ]
    return "\n".join(lines)


def baseline(prog, text, top, name: str) -> str:
    lines = _head(
        prog,
        top,
        text,
        f"baseline.cu of workload {name}: the frozen reference (cuco_baseline_*), the same "
        "code as the seed candidate, plus its compute-only and communication-only halves.",
    )
    lines += ["", "namespace {"] + top.device_code + text.compute_helpers + text.comm_helpers + [""]
    lines += _struct(text, extra=True)
    lines += [
        "static Program* program(cuco_ctx* ctx) { Program* p = (Program*)ctx->state; p->cuco_c = ctx; return p; }",
        "}  // namespace",
        "",
        'extern "C" int cuco_baseline_setup(cuco_ctx* ctx) { Program* p = new Program(); p->cuco_c = ctx; '
        "ctx->state = p; return p->setup(); }",
        'extern "C" int cuco_baseline_run(cuco_ctx* ctx) { return program(ctx)->run(); }',
        'extern "C" int cuco_baseline_run_compute(cuco_ctx* ctx) { return program(ctx)->run_compute(); }',
        'extern "C" int cuco_baseline_run_comm(cuco_ctx* ctx) { return program(ctx)->run_comm(); }',
        *(
            ['extern "C" int cuco_baseline_start_outputs(cuco_ctx* ctx) { return program(ctx)->start_outputs(); }']
            if text.start
            else []
        ),
        'extern "C" int cuco_baseline_teardown(cuco_ctx* ctx) {',
        "  Program* p = (Program*)ctx->state;",
        "  int rc = p ? (p->cuco_c = ctx, p->teardown()) : 0;",
        "  delete p;",
        "  ctx->state = nullptr;",
        "  return rc;",
        "}",
        "",
    ]
    return "\n".join(lines)


def _names(prog, role) -> list[str]:
    roles = ("output", "carried") if role == "output" else (role,)
    return [b.name for b in prog.buffers.values() if b.role in roles]


# ---------------------------------------------------------------- problem.cu


def _size_code(prog, bufs) -> tuple[list[str], list[str]]:
    """Declarations computing the harness buffers' sizes from the config's params and the rank count,
    in program order, and the TODOs for sizes that depend on anything else. A variable declared without
    a value and assigned by main()'s own statements before the region (`if (rank < low) chunk = a; else
    chunk = b;`) is computed by those statements, copied."""
    params = {p["name"]: p for p in prog.params}
    rank_vars = {prog.ranks.get("rank"): "cuco_c->rank", prog.ranks.get("nranks"): "cuco_c->nranks"}
    need, todo, problems = set(), [n for b in bufs for n in names_in(b.size)], []
    assigned: dict[str, list] = {}
    while todo:
        n = todo.pop()
        if n in need or n not in prog.vars:
            continue
        need.add(n)
        v = prog.vars[n]
        if n in params or n in rank_vars:
            continue
        if v.init is None:
            stmts = _assignments(prog, n)
            if not stmts:
                problems.append(f"{n} ({prog.main_src.path}:{v.line}) has no initialiser")
                continue
            assigned[n] = stmts
            todo.extend(x for st in stmts for x in names_in_statement(prog, st) if x != n)
            continue
        todo.extend(names_in(prog.main_src.text(v.init)))
        if _assignments(prog, n):  # `size_t count = a; if (count % n) count = ...;`: computed the same
            assigned[n] = _assignments(prog, n)
            todo.extend(x for st in assigned[n] for x in names_in_statement(prog, st) if x != n)
    items = []
    for v in (prog.vars[n] for n in need):
        if v.name in rank_vars:
            items.append((v.pos, f"const int {v.name} = {rank_vars[v.name]};"))
        elif v.name in params:
            items.append(
                (
                    v.pos,
                    f"const {v.base_type} {v.name} = ({v.base_type})cuco_param_get(cuco_c, "
                    f'"{v.name}", {params[v.name]["default"]});',
                )
            )
        elif v.init is not None:
            const = "" if v.name in assigned else "const "
            items.append((v.pos, f"{const}{v.type} {v.name} = {prog.main_src.text(v.init)};"))
            items += [(st.start_byte, prog.main_src.text(st)) for st in assigned.get(v.name, [])]
        elif v.name in assigned:
            items.append((v.pos, f"{v.type} {v.name}{{}};"))
            items += [(st.start_byte, prog.main_src.text(st)) for st in assigned[v.name]]
    seen, lines = set(), []
    for _, text in sorted(items, key=lambda i: i[0]):
        if text not in seen:
            seen.add(text)
            lines.append(text)
    return lines, problems


def _assignments(prog, name: str) -> list:
    """main()'s top-level statements before the region that assign `name` and nothing the harness owns:
    plain assignments and if/else chains whose every branch assigns it."""
    body = prog.main.child_by_field_name("body")
    region = prog.region_node
    out = []
    for st in body.named_children:
        if region is not None and st.start_byte >= region.start_byte:
            break
        if st.type not in ("expression_statement", "if_statement"):
            continue
        targets = {
            prog.main_src.text(a.child_by_field_name("left")) for a in walk(st) if a.type == "assignment_expression"
        }
        if name in targets and not any(n.type == "call_expression" for n in walk(st)):
            out.append(st)
    return out


def names_in_statement(prog, st) -> list[str]:
    return [prog.main_src.text(i) for i in walk(st) if i.type == "identifier"]


def problem(prog, inputs, outputs, top, name: str) -> str:
    size_lines, problems = _size_code(prog, inputs + outputs)
    dtype = next(
        (api.FLOAT_TOLERANCE_KEY[b.elem_type] for b in outputs if b.elem_type in api.FLOAT_TOLERANCE_KEY), "fp32"
    )
    exact = _exact_outputs(prog, outputs)
    lines = [
        f"// problem.cu of workload {name}: buffers, seeded inputs and verification (frozen; made by cuco init).",
        "// Every rank's outputs are checked against the frozen baseline run here, in the same process, on",
        "// the same inputs: bit-exact for outputs only data movement produced, the dtype tolerance otherwise.",
        '#include "cuco_problem.h"',
        "#include <cuda_fp16.h>",
        "#include <cuda_bf16.h>",
        "#include <cmath>",
        "#include <cstdint>",
        "#include <vector>",
    ]
    lines += [i for i in STD_INCLUDES if i not in top.includes] + top.includes + top.macros
    lines += ["", "namespace {"] + top.constants + [""]
    lines += ["int sizes(const cuco_ctx* cuco_c, size_t* in_bytes, size_t* out_bytes, char* err, size_t errn) {"]
    lines += ["  " + line for line in size_lines]
    if problems:
        lines.append(f"  // CUCO-TODO: the sizes depend on values init could not compute: {'; '.join(problems)}")
        lines.append(f'  snprintf(err, errn, "CUCO-TODO: buffer sizes unknown ({"; ".join(problems)[:120]})");')
        lines.append("  return 1;")
    else:
        for i, b in enumerate(inputs):
            lines.append(f"  in_bytes[{i}] = (size_t)({b.size});")
        for i, b in enumerate(outputs):
            lines.append(f"  out_bytes[{i}] = (size_t)({b.size});")
        lines.append(
            f"  for (int i = 0; i < {len(inputs)}; i++) if (in_bytes[i] == 0) {{ snprintf(err, errn, "
            f'"input %d has no bytes for these params", i); return 1; }}'
        )
        lines.append(
            f"  for (int i = 0; i < {len(outputs)}; i++) if (out_bytes[i] == 0) {{ snprintf(err, errn, "
            f'"output %d has no bytes for these params", i); return 1; }}'
        )
        lines.append("  (void)cuco_c;")
        lines.append("  return 0;")
    lines += ["}", "", PROBLEM_HELPERS, "}  // namespace", ""]
    in_names = ", ".join(f'"{b.name}"' for b in inputs)
    out_names = ", ".join(f'"{b.name}"' for b in outputs)
    in_kinds = ", ".join(_kind(b.elem_type) for b in inputs) or "0"
    out_kinds = ", ".join(_kind(b.elem_type) for b in outputs)
    out_exact = ", ".join("1" if b.name in exact else "0" for b in outputs)
    out_elem = ", ".join(str(api.ELEM_BYTES[b.elem_type]) for b in outputs)
    in_elem = ", ".join(str(api.ELEM_BYTES[b.elem_type]) for b in inputs) or "1"
    lines += [
        f"static const char* kInputs[] = {{{in_names or 'nullptr'}}};",
        f"static const char* kOutputs[] = {{{out_names}}};",
        f"static const int kInputKind[] = {{{in_kinds}}}, kInputElem[] = {{{in_elem}}};",
        f"static const int kOutputKind[] = {{{out_kinds}}}, kOutputElem[] = {{{out_elem}}}, "
        f"kOutputExact[] = {{{out_exact}}};",
        f"enum {{ kNumInputs = {len(inputs)}, kNumOutputs = {len(outputs)} }};",
        f'static const char* kDtype = "{dtype}";',
        "",
        PROBLEM_ENTRY_POINTS,
    ]
    return "\n".join(lines)


def _kind(elem: str) -> str:
    e = ELEM_CANON.get(elem, elem)
    return {"float": "K_F32", "double": "K_F64", "__half": "K_F16", "__nv_bfloat16": "K_BF16"}.get(e, "K_INT")


def _exact_outputs(prog, outputs) -> set[str]:
    """Outputs that only data movement produced from the inputs (no kernel and no reduction upstream)."""
    computed: set[str] = set()
    for op in prog.ops:
        if not op.in_region:
            continue
        pure = op.kind in ("p2p", "memcpy") or op.kind == "collective" and api.NCCL_COMM[op.name]["moves"]
        if not pure or set(op.reads) & computed:
            computed |= set(op.writes)
    return {b.name for b in outputs if b.name not in computed}


PROBLEM_HELPERS = r"""enum { K_F32 = 0, K_F64 = 1, K_F16 = 2, K_BF16 = 3, K_INT = 4 };

__device__ unsigned long long mix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ULL; x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL; return x ^ (x >> 31);
}

// Seeded inputs: uniform in [-1, 1) for floating types, integers in [0, 64).
__global__ void fill(void* p, size_t n, int kind, int elem, unsigned long long seed, unsigned sid) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long h = mix64(seed ^ ((unsigned long long)sid << 40) ^ i);
    float u = (float)(h >> 40) / (float)(1ULL << 24) * 2.0f - 1.0f;
    switch (kind) {
      case K_F32: ((float*)p)[i] = u; break;
      case K_F64: ((double*)p)[i] = u; break;
      case K_F16: ((__half*)p)[i] = __float2half(u); break;
      case K_BF16: ((__nv_bfloat16*)p)[i] = __float2bfloat16(u); break;
      default: {
        unsigned long long v = h % 64;
        if (elem == 1) ((unsigned char*)p)[i] = (unsigned char)v;
        else if (elem == 2) ((unsigned short*)p)[i] = (unsigned short)v;
        else if (elem == 4) ((unsigned int*)p)[i] = (unsigned int)v;
        else ((unsigned long long*)p)[i] = v;
      }
    }
  }
}

double value(const unsigned char* p, size_t i, int kind) {
  switch (kind) {
    case K_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case K_F64: { double d; memcpy(&d, p + 8 * i, 8); return d; }
    case K_BF16: { uint16_t b; memcpy(&b, p + 2 * i, 2); uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
    case K_F16: {
      uint16_t h; memcpy(&h, p + 2 * i, 2);
      int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp((double)(m | 1024), e - 25);
      return s ? -v : v;
    }
    default: return 0;
  }
}

__device__ double dvalue(const unsigned char* p, size_t i, int kind) {
  switch (kind) {
    case K_F32: return ((const float*)p)[i];
    case K_F64: return ((const double*)p)[i];
    case K_BF16: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    case K_F16: return __half2float(((const __half*)p)[i]);
    default: return 0;
  }
}

// Sum of squares and count of ref's finite values (the tolerance's scale).
__global__ void finite_sumsq(const unsigned char* ref, size_t n, int kind, double* ss, unsigned long long* cnt) {
  double s = 0; unsigned long long c = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    double r = dvalue(ref, i, kind);
    if (isfinite(r)) { s += r * r; c++; }
  }
  if (c) { atomicAdd(ss, s); atomicAdd(cnt, c); }
}

__device__ bool same_bytes(const unsigned char* a, const unsigned char* b, size_t i, int elem) {
  switch (elem) {
    case 1: return a[i] == b[i];
    case 2: return ((const unsigned short*)a)[i] == ((const unsigned short*)b)[i];
    case 4: return ((const unsigned int*)a)[i] == ((const unsigned int*)b)[i];
    case 8: return ((const unsigned long long*)a)[i] == ((const unsigned long long*)b)[i];
    default:
      for (int k = 0; k < elem; k++) if (a[i * elem + k] != b[i * elem + k]) return false;
      return true;
  }
}

// The lowest index whose element fails: bit-exact, or within tol * (|ref| + scale); NaN / Inf fail.
__global__ void first_bad(const unsigned char* got, const unsigned char* ref, size_t n, int elem, int kind, bool exact,
                          double tol, double scale, unsigned long long* first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    if (same_bytes(got, ref, i, elem)) continue;
    bool bad = exact || kind == K_INT;
    if (!bad) {
      double r = dvalue(ref, i, kind), x = dvalue(got, i, kind);
      bad = !isfinite(r) || !isfinite(x) || fabs(x - r) > tol * (fabs(r) + scale);
    }
    if (bad) atomicMin(first, (unsigned long long)i);
  }
}

// First element of got that differs from ref (bit-exact, or within tol * (|ref| + 10% of ref's rms)),
// compared on the device: a call's outputs can be gigabytes (every benchmark call is checked), and only the
// failing element comes back to the host. -1: none; -2: a CUDA error.
long long compare(const void* got, const void* ref, size_t n, int elem, int kind, bool exact, double tol,
                  cudaStream_t s, double* e, double* g) {
  struct Scratch { double ss; unsigned long long cnt, first; };
  static Scratch* d = nullptr;   // kept: a cudaFree per check synchronizes the device and unmaps memory
  Scratch h = {0, 0, ~0ULL};
  if (!d && cudaMalloc(&d, sizeof(Scratch)) != cudaSuccess) { d = nullptr; return -2; }
  bool ok = cudaMemcpyAsync(d, &h, sizeof h, cudaMemcpyHostToDevice, s) == cudaSuccess;
  const unsigned char* gp = (const unsigned char*)got;
  const unsigned char* rp = (const unsigned char*)ref;
  double scale = 0;
  if (ok && !exact && kind != K_INT) {
    finite_sumsq<<<1024, 256, 0, s>>>(rp, n, kind, &d->ss, &d->cnt);
    ok = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    scale = h.cnt ? 0.1 * sqrt(h.ss / h.cnt) : 0.0;
  }
  if (ok) {
    first_bad<<<1024, 256, 0, s>>>(gp, rp, n, elem, kind, exact, tol, scale, &d->first);
    ok = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
  }
  long long bad = !ok ? -2 : h.first == ~0ULL ? -1 : (long long)h.first;
  if (bad >= 0) {
    unsigned char eg[16] = {0};
    ok = cudaMemcpy(eg, rp + (size_t)bad * elem, elem, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaMemcpy(eg + 8, gp + (size_t)bad * elem, elem, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (!ok) bad = -2;
    else if (kind == K_INT) { *e = 0; *g = 0; memcpy(e, eg, elem < 8 ? elem : 8); memcpy(g, eg + 8, elem < 8 ? elem : 8); }
    else { *e = value(eg, 0, kind); *g = value(eg + 8, 0, kind); }
  }
  return bad;
}
"""

PROBLEM_ENTRY_POINTS = r"""extern "C" int cuco_problem_describe(const cuco_ctx* ctx, cuco_problem* p) {
  size_t in_bytes[CUCO_MAX_BUFFERS] = {0}, out_bytes[CUCO_MAX_BUFFERS] = {0};
  if (sizes(ctx, in_bytes, out_bytes, p->error, sizeof p->error) != 0) return 1;
  p->ninputs = kNumInputs; p->noutputs = kNumOutputs; p->dtype = kDtype;
  for (int i = 0; i < kNumInputs; i++) { p->input_names[i] = kInputs[i]; p->input_bytes[i] = in_bytes[i]; }
  for (int i = 0; i < kNumOutputs; i++) { p->output_names[i] = kOutputs[i]; p->output_bytes[i] = out_bytes[i]; }
  return 0;
}

extern "C" int cuco_problem_make_inputs(const cuco_ctx* ctx, void* const* pristine, unsigned long long seed, cudaStream_t s) {
  size_t in_bytes[CUCO_MAX_BUFFERS] = {0}, out_bytes[CUCO_MAX_BUFFERS] = {0};
  char err[256];
  if (sizes(ctx, in_bytes, out_bytes, err, sizeof err) != 0) return 1;
  for (int i = 0; i < kNumInputs; i++) {
    fill<<<512, 256, 0, s>>>(pristine[i], in_bytes[i] / kInputElem[i], kInputKind[i], kInputElem[i], seed,
                             1000u * (unsigned)(i + 1) + (unsigned)ctx->rank);
  }
  return cudaGetLastError() != cudaSuccess;
}

// Present where the region carries buffers from one iteration to the next (baseline.cu defines it): the
// reference starts from the program's own starting value, as every harness call does.
extern "C" int cuco_baseline_start_outputs(cuco_ctx* ctx) __attribute__((weak));

// The reference's buffers and the baseline's state for it live from one check to the next, set up again only
// when the config changes. Every benchmark call is checked: allocating and freeing them per check (gigabytes
// where the program's buffers are) unmapped memory between timed calls, and the call timed right after a check
// ran slower than the others (NVIDIA's Jacobi at 16384 x 16384: 0.876 against 0.828 ms), which favoured the
// candidate, never timed right after its own check.
namespace {
struct Reference {
  bool ready = false;
  cuco_ctx ctx;   // a copy of the config's context with the reference's own buffers and state
};
Reference g_reference;   // one per rank: problem.cu runs in the rank's process

bool same_config(const cuco_ctx& a, const cuco_ctx& b) {
  if (a.rank != b.rank || a.nparams != b.nparams || a.ninputs != b.ninputs || a.noutputs != b.noutputs) return false;
  for (int i = 0; i < a.nparams; i++)
    if (a.params[i].value != b.params[i].value || strcmp(a.params[i].name, b.params[i].name) != 0) return false;
  for (int i = 0; i < a.ninputs; i++) if (a.inputs[i].bytes != b.inputs[i].bytes) return false;
  for (int i = 0; i < a.noutputs; i++) if (a.outputs[i].bytes != b.outputs[i].bytes) return false;
  return true;
}

void drop_reference() {
  Reference& r = g_reference;
  if (r.ready) cuco_baseline_teardown(&r.ctx);
  for (int i = 0; i < kNumInputs; i++) if (r.ctx.inputs[i].ptr) cudaFree(r.ctx.inputs[i].ptr);
  for (int i = 0; i < kNumOutputs; i++) if (r.ctx.outputs[i].ptr) cudaFree(r.ctx.outputs[i].ptr);
  r = Reference();
}

// The reference for this config, set up once (collective: the baseline's setup may call NCCL on hcomm, and
// every rank checks the same calls, so every rank comes here alike).
cuco_ctx* reference_for(const cuco_ctx* ctx, ncclComm_t hcomm, cudaStream_t s) {
  Reference& r = g_reference;
  if (r.ready && same_config(r.ctx, *ctx) && r.ctx.comm == hcomm && r.ctx.stream == s) return &r.ctx;
  drop_reference();
  r.ctx = *ctx;
  r.ctx.comm = hcomm; r.ctx.stream = s; r.ctx.state = nullptr; r.ctx.error[0] = 0;
  for (int i = 0; i < kNumInputs; i++) { r.ctx.inputs[i].ptr = nullptr; r.ctx.inputs[i].win = nullptr; }
  for (int i = 0; i < kNumOutputs; i++) { r.ctx.outputs[i].ptr = nullptr; r.ctx.outputs[i].win = nullptr; }
  int rc = 0;
  for (int i = 0; i < kNumInputs && !rc; i++) rc |= cudaMalloc(&r.ctx.inputs[i].ptr, ctx->inputs[i].bytes) != cudaSuccess;
  for (int i = 0; i < kNumOutputs && !rc; i++) rc |= cudaMalloc(&r.ctx.outputs[i].ptr, ctx->outputs[i].bytes) != cudaSuccess;
  if (!rc) rc |= cuco_baseline_setup(&r.ctx) != 0;
  if (rc) {
    fprintf(stderr, "[rank %d] verify: the reference's setup failed: %s\n", ctx->rank, r.ctx.error);
    r.ctx.state = nullptr;   // its setup failed: nothing to tear down
    drop_reference();
    return nullptr;
  }
  r.ready = true;
  return &r.ctx;
}
}  // namespace

// The reference: the frozen baseline run once more, here, on copies of the pristine inputs (collective:
// every rank calls verify, so the baseline's own NCCL calls run on the harness's communicator).
extern "C" int cuco_problem_verify(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s,
                                   double tol, cuco_mismatch* mm) {
  mm->found = 0;
  cuco_ctx* ref = reference_for(ctx, hcomm, s);
  int rc = ref == nullptr;
  for (int i = 0; i < kNumInputs && !rc; i++)
    rc |= cudaMemcpyAsync(ref->inputs[i].ptr, pristine[i], ctx->inputs[i].bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess;
  for (int i = 0; i < kNumOutputs && !rc; i++)   // poisoned like the harness's, before every reference run
    rc |= cudaMemsetAsync(ref->outputs[i].ptr, 0xFF, ctx->outputs[i].bytes, s) != cudaSuccess;
  if (!rc) ref->error[0] = 0, ref->iteration = ctx->iteration;   // the same index as the call it checks
  if (!rc && cuco_baseline_start_outputs) rc |= cuco_baseline_start_outputs(ref) != 0;
  if (!rc) rc |= cuco_baseline_run(ref) != 0;
  if (!rc) rc |= cudaStreamSynchronize(s) != cudaSuccess;
  if (rc && ref) fprintf(stderr, "[rank %d] verify: the reference run failed: %s\n", ctx->rank, ref->error);
  for (int i = 0; i < kNumOutputs && !rc && !mm->found; i++) {
    size_t n = ctx->outputs[i].bytes / kOutputElem[i];
    double e = 0, g = 0;
    long long bad = compare(ctx->outputs[i].ptr, ref->outputs[i].ptr, n, kOutputElem[i], kOutputKind[i],
                            kOutputExact[i] != 0, tol, s, &e, &g);
    if (bad == -2) { rc = 1; break; }
    if (bad >= 0) {
      mm->found = 1; mm->index = bad; mm->expected = e; mm->got = g;
      strcpy(mm->what, kOutputExact[i] ? "transfer" : "compute");
      snprintf(mm->buffer, sizeof mm->buffer, "%s", kOutputs[i]);
    }
  }
  return rc;
}
"""


# ---------------------------------------------------------------- workload.yaml

# The shipped CUDA workload whose harness files, build line, launch and timeouts an init-made workload
# takes over (so it follows the frozen harness as that changes).
TEMPLATE = Path(__file__).resolve().parent.parent.parent / "workloads" / "gemm_allgather" / "workload.yaml"


def _rebase(entry: str, harness_root: str) -> str:
    """A template path under ../_harness/ made relative to the new folder; the workload's own files
    (problem.cu, baseline.cu) keep their names."""
    return f"{harness_root}/{entry[len('../_harness/') :]}" if entry.startswith("../_harness/") else entry


def workload_yaml(
    prog, name: str, ranks: int, inputs, outputs, harness_root: str, launch_env: dict[str, str] | None = None
) -> str:
    template = yaml.safe_load(TEMPLATE.read_text())
    public = {p["name"]: p["default"] for p in prog.params}
    configs = [{"name": "program", "public": True, "bench": True, "params": dict(public)}]
    if public:
        configs.append(
            {
                "name": "hidden_scaled",
                "public": False,
                "bench": False,
                "params": {k: _scaled(v) for k, v in public.items()},
            }
        )
    space = design_space(prog)
    spec = {
        "name": name,
        "description": f"{', '.join(prog.files)} as a workload (made by cuco init): " + _summary(prog),
        "language": "cuda",
        "ranks": ranks,
        "candidate": "candidate.cu",
        "harness": {
            "sources": [_rebase(x, harness_root) for x in template["harness"]["sources"]],
            "headers": [_rebase(x, harness_root) for x in template["harness"]["headers"]],
            "nonce": True,
        },
        "build": dict(template["build"]),
        "launch": {
            **template["launch"],
            "gpus": ranks,
            "env": {**(template["launch"].get("env") or {}), **(launch_env or {})},
        },
        "timeouts": dict(template["timeouts"]),
        "benchmark": {"warmup": 5, "iters": 21},
        "configs": configs,
        "tolerances": {"fp32": 1.0e-4, "fp64": 1.0e-9, "fp16": 1.0e-2, "bf16": 1.6e-2},
        "design_space": space,
        "llm": {"task": task_text(prog, inputs, outputs), "api_notes": API_NOTES},
    }
    head = (
        f"# {name}: made by `cuco init` from {', '.join(prog.files)}. The baseline is the program's own\n"
        "# repeated region (baseline.cu, frozen); candidate.cu is the seed the search starts from.\n"
    )
    head += "".join(f"# build flags: {note}\n" for note in getattr(prog, "flag_notes", []))
    head += "".join(f"# host collective: {note} (cuco_abi.h)\n" for note in prog.host_collectives)
    return head + yaml.safe_dump(spec, sort_keys=False, width=110, default_flow_style=None)


def _scaled(v: int) -> int:
    """A hidden size: three quarters of the program's, kept a multiple of the same power of two (<= 256)."""
    if not isinstance(v, int) or v < 8:
        return v
    g = 1
    while v % (g * 2) == 0 and g < 256:
        g *= 2
    return max(g, (v * 3 // 4) // g * g)


def _summary(prog) -> str:
    steps = [f"{s['name']}" for s in prog.dataflow]
    return " -> ".join(steps) + " per iteration"


def task_text(prog, inputs, outputs) -> str:
    lines = [
        f"The program ({', '.join(prog.files)}) repeats this region on every rank (one call of run() is one iteration):"
    ]
    for s in prog.dataflow:
        lines.append(
            f"  - {s['name']} ({s['kind']}) reads {', '.join(s['reads']) or 'nothing'}, writes "
            f"{', '.join(s['writes']) or 'nothing'}   [{s['at']}]"
        )
    lines.append(
        f"Inputs (read-only, made by the harness): {', '.join(b.name for b in inputs) or 'none'}. "
        f"Outputs (verified on every rank against the frozen baseline): {', '.join(b.name for b in outputs)}."
    )
    if prog.opportunities:
        lines.append("Overlap opportunities the analysis found, largest first:")
        for o in prog.opportunities:
            size = f"{o['bytes_value']} bytes" if o["bytes_value"] is not None else o["bytes"]
            lines.append(
                f"  {o['rank']}. {o['producer'] or '-'} -> {o['collective']} -> {o['consumer'] or '-'} "
                f"({size}, {o['pattern']}): " + "; ".join(x["design"] for x in o["options"])
            )
    if prog.host_collectives:
        lines.append(
            "The region's host MPI collectives run as the harness's host collectives (cuco_abi.h, through "
            "cuco_c->host_comm): blocking host calls among the ranks' processes, as the program makes them; "
            "every rank must make the same ones in the same order: " + "; ".join(prog.host_collectives) + "."
        )
    lines.append(
        "The seed runs every step on one stream, so communication waits for the computation. Make the "
        "whole iteration faster by overlapping the communication with the kernels (device-initiated LSA "
        "stores into the peers' NCCL windows, copy-engine copies per chunk on a second stream, or a fused "
        "kernel), without changing any output beyond the tolerance."
    )
    return "\n".join(lines) + "\n"


API_NOTES = """\
- ABI: cuco_abi.h. run() enqueues one iteration and returns; join all work to ctx->stream before returning.
  Outputs are poisoned (0xFF) before every call; inputs must not change. The Program struct's members are the
  program's own variables; setup() allocates its scratch buffers, teardown() frees them.
- ctx->inputs[i] / ctx->outputs[i] are NCCL symmetric windows (ncclWindow_t win): in a kernel,
  ncclGetPeerPointer(win, offset, peer) is a plain device address of the peer's copy (LSA over NVLink).
  Scratch the candidate reaches from peers must be ncclMemAlloc'd and registered in setup
  (ncclCommWindowRegister(comm, p, bytes, &w, NCCL_WIN_COLL_SYMMETRIC), collective).
- Producers fence (__threadfence_system) before raising a flag; consumers acquire. Bound every spin-wait with
  cuco_wait_geq (cuco_device.cuh) and raise ctx->timeout_flag on expiry.
- NCCL 2.28.9; never use multimem / NVLS. No preprocessor lines inside EVOLVE-BLOCKs.
- Besides the ABI define only static helpers and kernels: no constructors (or host objects that need one) at
  file scope, no host inline assembly, clocks, files, environment or device resets (refused before anything runs).
"""
