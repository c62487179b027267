// Positions from a left-padded mask, (cumsum(mask) - 1) * mask, as BLOOM's
// ALiBi computes them: the running sum is a runtime call; the rest fuses.
func.func @main(%mask: tensor<2x8xi64>) -> tensor<2x8xi64> {
  %one = weft.constant dense<1> : tensor<i64>
  %c = weft.cumsum %mask axis 1 : tensor<2x8xi64>
  %p = weft.sub %c, %one : (tensor<2x8xi64>, tensor<i64>) -> tensor<2x8xi64>
  %y = weft.mul %p, %mask : tensor<2x8xi64>
  return %y : tensor<2x8xi64>
}
