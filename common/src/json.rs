//! Python-compatible JSON (placeholder; being written).
