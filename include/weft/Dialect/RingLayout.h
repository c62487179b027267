//===- RingLayout.h - Which layout a ring's sequence takes -------*- C++
//-*-===//
//
// Part of the Weft project.
//
// Ring attention splits the sequence over the cp ranks either in contiguous
// chunks (rank r holds chunk r) or in the load-balanced (zigzag) layout of
// two mirrored half-chunks per rank (r and 2cp - 1 - r). -weft-apply-plan
// chooses, and the planner checks a plan's shapes, by the same rule.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_RINGLAYOUT_H
#define WEFT_DIALECT_RINGLAYOUT_H

#include <cstdint>

namespace weft {

/// True if an attention over `seq` positions needs the load-balanced layout
/// on a ring. A causal attention over contiguous chunks leaves the last
/// rank c times the first rank's work, which the zigzag layout evens out.
/// Under a causal sliding window of `window` keys, every query past the
/// first `window` positions sees `window` keys: the contiguous layout's
/// most loaded rank does 1 / (1 - window / (2 seq)) times the mean, at most
/// 16/15 (1/15 of the attention's work) where the window is no longer than
/// an eighth of the sequence. There the contiguous layout is kept: each
/// rank's block reaches the ranks after it only, so the ring passes it
/// over fewer steps (one where the window fits in a chunk, against two, to
/// the next and the previous rank, for the zigzag layout's two chunks), and
/// it needs the sequence divisible by cp, not 2 x cp.
/// (Attention without a causal mask keeps the load-balanced layout: it is
/// balanced either way, and its ring sends every block to every rank.)
inline bool ringNeedsLoadBalance(int64_t seq, bool causal, int64_t window) {
  return !causal || window <= 0 || 8 * window > seq;
}

} // namespace weft

#endif // WEFT_DIALECT_RINGLAYOUT_H
