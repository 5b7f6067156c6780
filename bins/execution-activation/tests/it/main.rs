//! The single integration-test binary of `execution-activation`: every area
//! is a module here, so the tests link once (a test's name is
//! `<module>::<test>`).

mod activation_durability;
mod activation_legacy_runner;
mod activation_replace_config;
mod activation_volume;
mod api_contract_corpus;
