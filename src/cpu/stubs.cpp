// STUB until the CPU backend lands.
#include "api/internal.hpp"
namespace flashgdn::cpu {
Status chunk_fwd(const ChunkFwdParams&, const ChunkDims&) { return FGDN_ERROR(unsupported, "cpu chunk_fwd"); }
Status chunk_bwd(const ChunkBwdParams&, const SeqDims&) { return FGDN_ERROR(unsupported, "cpu chunk_bwd"); }
Status gating(const GatingParams&, const GatingDims&) { return FGDN_ERROR(unsupported, "cpu gating"); }
Status recurrent(const RecurrentParams&, const RecurrentDims&) { return FGDN_ERROR(unsupported, "cpu recurrent"); }
Status recurrent_commit(const RecurrentCommitParams&, const CommitDims&) {
  return FGDN_ERROR(unsupported, "cpu recurrent_commit");
}
}  // namespace flashgdn::cpu
