// baseline.cu -- the frozen host-driven baseline of moe_dispatch_combine (the cuco_baseline_* symbols): the
// seed's own translation unit with its entry points renamed, so the seed measures 1.0x against it (same
// code, same layout). moe_seed.inc is a frozen copy of candidate.cu as shipped (a test checks that the two
// agree). run_compute / run_comm are its two halves alone, on the
// layout of the last full call (the harness times them for the overlap bound).
#define cuco_candidate_setup cuco_baseline_setup
#define cuco_candidate_run cuco_baseline_run
#define cuco_candidate_teardown cuco_baseline_teardown
#include "moe_seed.inc"

// routing, packing, the experts and the weighted combine; no communication
extern "C" int cuco_baseline_run_compute(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  return moe_route_and_pack(ctx, st) || moe_experts(ctx, st) || moe_combine(ctx, st);
}
// the count exchange (with its host wait) and both all-to-alls
extern "C" int cuco_baseline_run_comm(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  return moe_exchange_counts(ctx, st) || moe_all_to_all(ctx, st, false) || moe_all_to_all(ctx, st, true);
}
