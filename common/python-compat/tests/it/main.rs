//! The single integration-test binary of `python-compat`: every area
//! is a module here, so the tests link once (a test's name is
//! `<module>::<test>`).

mod cpython;
mod exception_python;
mod json_golden;
mod json_model;
mod json_properties;
mod json_python;
mod json_refusals;
mod json_support;
mod path_python;
