// The plugin's OpenMP paths (the oneDNN path and the dense baseline: oneDNN runs on GNU libgomp
// here, and kernel_onednn.cpp has its own parallel region) across a fork of the host process.
// libgomp is not fork-safe: a child forked after the parent's first parallel region keeps a
// thread pool whose threads did not survive the fork, and its next parallel region waits for them
// forever. So the plugin notes its first OpenMP use, and a process forked after it never enters an
// OpenMP region of the plugin again: the default choice falls back to the fused kernels (the
// plugin's own thread team, which is fork-safe), and a path forced onto OpenMP fails with
// openmp_fork_reason() instead of hanging.
//
// Only the plugin's own OpenMP use is seen: a host (or another library on the same libgomp) that
// ran a parallel region on the thread that forks leaves a child whose oneDNN path would still
// hang; such a host forks before that, or runs the child with NIBBLE_CPU_PATH=fused.
#pragma once

namespace nibble::cpu {

/// Called before each of the plugin's OpenMP regions (cheap after the first).
void note_openmp_use();
/// True in a process forked (at any depth) after the plugin used OpenMP.
bool openmp_lost_to_fork();
/// Why an OpenMP path cannot run here, for error messages.
const char* openmp_fork_reason();

}  // namespace nibble::cpu
