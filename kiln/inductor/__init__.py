"""kiln's compiler backend: lowering graphs to loop IR, scheduling, and CPU/GPU code generation."""
