// The stage loop of a rank > 0: waits for rank 0's load request, loads the model and answers
// the handshake, then serves session commands (protocol.h) for its layer range until shutdown.
//
// Owns: the per-session state of a remote stage (its part of the cache, scratch arena,
// checkpoints, and on the last stage the logits and the sampling requests). Does not own: the
// first stage (rank 0 runs it inside the engine's session) or scheduling (pipeline.h).
#pragma once

namespace magnetar::dist {

// Runs until rank 0 sends shutdown; returns the process exit code. An internal failure is
// reported on stderr and aborts the job (rank 0 then reports it too).
int run_worker();

}  // namespace magnetar::dist
