// RUN: weft-opt %s -split-input-file -weft-shard-parameters | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-shard-parameters=axes=dp | FileCheck %s --check-prefix=DP
// RUN: weft-opt %s -split-input-file -weft-shard-parameters -weft-partition | FileCheck %s --check-prefix=PART

// ZeRO-3: every weight whose rows, as the rank holds them, the data-parallel
// group divides is stored over it (in mesh order; tp already splits `w`'s
// rows, the group splits them further). `b` has 3 rows, which 4 ranks do not
// divide; a scalar has none; `g` is stored over gz already.
weft.mesh @mesh(dp = 2, ulysses = 2, tp = 2, gz = 2)
// CHECK-LABEL: func.func @weights
// CHECK: weft.parameter "w" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}tp], []]>], weft.stored_over = ["dp", "ulysses"]} : tensor<16x4xf32>
// CHECK: weft.parameter "e" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>], weft.stored_over = ["dp", "ulysses"]} : tensor<4x6xf32>
// CHECK: weft.parameter "b" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}]]>]} : tensor<3xf32>
// CHECK: weft.parameter "s" {weft.sharding = [#weft.sharding<@mesh, []>]} : tensor<f32>
// CHECK: weft.parameter "g" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], []]>], weft.stored_over = ["gz"]} : tensor<4x4xf32>
// With axes=dp only dp; `b`'s 3 rows stay whole.
// DP: weft.parameter "w" {{.*}}weft.stored_over = ["dp"]} : tensor<16x4xf32>
// DP: weft.parameter "e" {{.*}}weft.stored_over = ["dp"]} : tensor<4x6xf32>
// DP-NOT: weft.stored_over = ["dp"]} : tensor<3xf32>
func.func @weights() -> (tensor<16x4xf32>, tensor<4x6xf32>, tensor<3xf32>, tensor<f32>, tensor<4x4xf32>) {
  %w = weft.parameter "w" {weft.sharding = [#weft.sharding<@mesh, [["tp"], []]>]} : tensor<16x4xf32>
  %e = weft.parameter "e" {weft.sharding = [#weft.sharding<@mesh, [[], ["tp"]]>]} : tensor<4x6xf32>
  %b = weft.parameter "b" {weft.sharding = [#weft.sharding<@mesh, [[]]>]} : tensor<3xf32>
  %s = weft.parameter "s" {weft.sharding = [#weft.sharding<@mesh, []>]} : tensor<f32>
  %g = weft.parameter "g" {weft.sharding = [#weft.sharding<@mesh, [[], []]>], weft.stored_over = ["gz"]} : tensor<4x4xf32>
  return %w, %e, %b, %s, %g : tensor<16x4xf32>, tensor<4x6xf32>, tensor<3xf32>, tensor<f32>, tensor<4x4xf32>
}

// -----

// Partitioned, each rank keeps its block of a stored weight and all-gathers
// it where it is used; the weight still says what it is stored over (the
// optimizer step holds that block).
weft.mesh @mesh(dp = 2)
// PART-LABEL: func.func @use
// PART: %[[W:.*]] = weft.parameter "w" {weft.stored_over = ["dp"]} : tensor<4x4xf32>
// PART: %[[BLOCK:.*]] = weft.all_slice %[[W]] over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// PART: %[[FULL:.*]] = weft.all_gather %[[BLOCK]] over @mesh ["dp"] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
// PART: weft.matmul %{{.*}}, %[[FULL]]
func.func @use(%x: tensor<2x4xf32> {weft.sharding = #weft.sharding<@mesh, [["dp"], []]>})
    -> (tensor<2x4xf32> {weft.sharding = #weft.sharding<@mesh, [["dp"], []]>}) {
  %w = weft.parameter "w" {weft.sharding = [#weft.sharding<@mesh, [[], []]>]} : tensor<4x4xf32>
  %y = weft.matmul %x, %w {weft.sharding = [#weft.sharding<@mesh, [["dp"], []]>]} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
