//! Safe filesystem primitives (placeholder; being written).
