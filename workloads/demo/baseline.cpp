// The frozen host-driven baseline (and the reference the speedup is measured against): the seed's own
// translation unit, compiled with its entry points renamed, so that the seed measures 1.0x against it
// (same code, same layout). seed_copy.inc is a frozen copy of candidate.cpp as shipped; `cuco validate`
// checks that the two agree.
#define cuco_run baseline_run
#define cuco_setup baseline_setup
#define cuco_teardown baseline_teardown
#include "seed_copy.inc"
