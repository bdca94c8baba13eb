# One line per component test; CONCURRENCY marks the ones ThreadSanitizer must run.
