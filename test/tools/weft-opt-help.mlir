// RUN: weft-opt --help | FileCheck %s

// weft-opt registers the weft dialect, the upstream dialects Weft uses, and
// Weft's passes next to the upstream ones its pipelines run.

// CHECK: Available Dialects: arith, builtin, func, tensor, weft
// CHECK-DAG: --canonicalize
// CHECK-DAG: --cse
// CHECK-DAG: --inline
// CHECK-DAG: --symbol-dce
// CHECK-DAG: --weft-canonicalize {{.*}}Folds weft ops and removes what no longer has a use
// CHECK-DAG: --max-iterations=
// CHECK-DAG: --weft-print-op-facts {{.*}}Reports each op's sharding rule and cost as remarks
