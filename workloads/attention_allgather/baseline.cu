// baseline.cu -- the frozen host-driven baseline of attention_allgather (the cuco_baseline_* symbols): the
// seed's own translation unit with its entry points renamed, so the seed measures 1.0x against it (same
// code, same layout). attn_seed.inc is a frozen copy of candidate.cu as shipped (a test checks that the two
// agree). run_compute / run_comm are its two halves alone (the harness times them for the overlap bound).
#define cuco_candidate_setup cuco_baseline_setup
#define cuco_candidate_run cuco_baseline_run
#define cuco_candidate_teardown cuco_baseline_teardown
#include "attn_seed.inc"

// the attention pass over the gathered buffers of the last call
extern "C" int cuco_baseline_run_compute(cuco_ctx* ctx) { return attn_compute(ctx, (AttnState*)ctx->state); }
// the two all-gathers
extern "C" int cuco_baseline_run_comm(cuco_ctx* ctx) { return attn_gather(ctx, (AttnState*)ctx->state); }
