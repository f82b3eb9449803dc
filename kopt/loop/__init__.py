"""Floor 6: the NCU-guided optimization loop -- iteration state, contests, profiling, submitted
versions, the review gate, the next iteration's proposal."""
