//! The single integration-test binary of `update-runner`: every area
//! is a module here, so the tests link once (a test's name is
//! `<module>::<test>`).

mod archive_strategy;
mod installer_log;
mod installer_process;
mod installer_support;
mod proxy_environment;
mod rate_limit_support;
mod release_archive;
mod release_archive_budget;
mod release_archive_properties;
mod release_download;
mod release_local_zone;
mod release_manifest;
mod release_versions;
mod runner_check_release;
mod runner_recovery_context;
mod runner_server_health;
mod runner_team_hub_fence;
mod user_paths;
