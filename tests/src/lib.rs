//! Test support for the black-box tests.
