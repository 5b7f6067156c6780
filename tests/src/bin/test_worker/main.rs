//! Test-only stand-in for the Python execution service (not shipped).
fn main() {}
