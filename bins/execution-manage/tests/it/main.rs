//! The single integration-test binary of `execution-manage`: every area
//! is a module here, so the tests link once (a test's name is
//! `<module>::<test>`).

mod transaction_journal;
