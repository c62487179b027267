// The registered partition pipeline is the pass sequence weft run, weft
// compile and the planner build: the same program as the passes one by one.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-partition-with-plan="tp=2 sp=true" > %t.pipeline
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-unfuse-projections -weft-apply-plan="tp=2 sp=1" \
// RUN:   -weft-propagate-sharding -weft-partition -weft-optimize-collectives -weft-canonicalize > %t.passes
// RUN: diff %t.pipeline %t.passes
// RUN: FileCheck %s < %t.pipeline

// CHECK: weft.mesh @mesh(dp = 1, cp = 1, ulysses = 1, tp = 2)
// CHECK: weft.layer "h"
// CHECK: weft.reduce_scatter sum {{.*}} over @mesh ["tp"] dim 1

// What the emitters need: the same program, layers inlined.
// RUN: weft-opt %t.pipeline -weft-prepare-cuda | FileCheck %s --check-prefix=FLAT
// FLAT-NOT: weft.layer
// FLAT: weft.reduce_scatter
