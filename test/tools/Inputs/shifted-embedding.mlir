// Token ids shifted by 100 before an embedding of 4 rows: the kernel, not
// the input check, finds the ids out of range (weft-run-input-hygiene.test).
func.func @main(%ids: tensor<2xi64>) -> tensor<2x3xf32> {
  %table = weft.parameter "table" : tensor<4x3xf32> = dense<1.0>
  %shift = weft.constant dense<100> : tensor<i64>
  %moved = weft.add %ids, %shift : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %rows = weft.embedding %table[%moved] : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  return %rows : tensor<2x3xf32>
}
