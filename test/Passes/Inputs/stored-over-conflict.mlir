// A weight stored over an axis its sharding already uses: the partitioner
// refuses it (test/Passes/weft-apply-plan-3d.mlir).
module {
  weft.mesh @mesh(gx = 2)
  func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %w = weft.parameter "w" {weft.sharding = [#weft.sharding<@mesh, [[gx], []]>], weft.stored_over = ["gx"]} : tensor<8x8xf32>
    %y = weft.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}
