//! The native operations install.sh runs (`snapshot`, `suppress`, `start`) on a
//! launchd host: the shared NativeServices drives `/bin/launchctl`, here
//! answered with recorded launchd output (tests/fixtures/launchd), so each
//! operation's exact command sequence on macOS is checked on Linux.

use agents_common::NativeServices;
use agents_tests::recorded_commands::{
    domain, expect, launchd_fixture, launchd_print_disabled, reply, Exchange, Recorded, ServiceHome,
};

use super::*;
use crate::native::managed;

const WORKER: &str = "com.agentsdock.server";
const GATEWAY: &str = "com.agentsdock.gateway";

/// How one agent looks to `launchctl print`.
#[derive(Clone, Copy)]
enum Agent {
    Running(u32),
    Scheduled,
    Unloaded,
}

fn label(role: &str) -> &'static str {
    if role == "worker" {
        WORKER
    } else {
        GATEWAY
    }
}

fn target(role: &str) -> String {
    format!("{}/{}", domain(), label(role))
}

/// `_observe(role)`: `print-disabled` (both enabled), then `print`.
fn observed(role: &str, agent: Agent) -> Vec<Exchange> {
    let disabled = launchd_print_disabled(&[(WORKER, "enabled"), (GATEWAY, "enabled")]);
    let print = match agent {
        Agent::Running(pid) => reply(
            0,
            &launchd_fixture("print-running.txt", label(role), &pid.to_string()),
            "",
        ),
        Agent::Scheduled => reply(
            0,
            &launchd_fixture("print-spawn-scheduled.txt", label(role), ""),
            "",
        ),
        Agent::Unloaded => reply(
            113,
            "",
            &launchd_fixture("print-not-found.stderr", label(role), ""),
        ),
    };
    vec![
        expect(
            &["/bin/launchctl", "print-disabled", &domain()],
            reply(0, &disabled, ""),
        ),
        expect(&["/bin/launchctl", "print", &target(role)], print),
    ]
}

/// `snapshot()`: the worker, then the gateway.
fn snapshot(worker: Agent, gateway: Agent) -> Vec<Exchange> {
    let mut exchanges = observed("worker", worker);
    exchanges.extend(observed("gateway", gateway));
    exchanges
}

fn command(verb: &str, role: &str) -> Exchange {
    expect(&["/bin/launchctl", verb, &target(role)], reply(0, "", ""))
}

/// A Darwin layout whose LaunchAgents hold the plists of some roles.
struct Mac(ServiceHome);

impl Mac {
    fn with_plists(roles: &[&str]) -> Mac {
        Mac(ServiceHome::with_files("Darwin", roles))
    }

    fn bootstrap(&self, role: &str) -> Exchange {
        self.0.bootstrap(role, reply(0, "", ""))
    }

    fn services(&self, recorded: &Recorded) -> Box<dyn Native> {
        managed(NativeServices::with_runner(
            &self.0.layout,
            recorded.boxed(),
        ))
    }
}

#[test]
fn start_enables_and_bootstraps_each_plist_that_is_not_running() {
    let mac = Mac::with_plists(&["worker", "gateway"]);
    // Nothing to reload on launchd; each unloaded agent is enabled, then
    // bootstrapped from its plist, the worker first.
    let mut exchanges = observed("worker", Agent::Unloaded);
    exchanges.extend([command("enable", "worker"), mac.bootstrap("worker")]);
    exchanges.extend(observed("gateway", Agent::Unloaded));
    exchanges.extend([command("enable", "gateway"), mac.bootstrap("gateway")]);
    let recorded = Recorded::new(exchanges);
    start(mac.services(&recorded).as_ref()).unwrap();
    assert_eq!(recorded.unused(), 0);
    // A running or restarting agent is left alone.
    let mut exchanges = observed("worker", Agent::Running(4242));
    exchanges.extend(observed("gateway", Agent::Scheduled));
    let recorded = Recorded::new(exchanges);
    start(mac.services(&recorded).as_ref()).unwrap();
    assert_eq!(recorded.unused(), 0);
}

#[test]
fn start_stops_at_a_refused_bootstrap() {
    let mac = Mac::with_plists(&["worker", "gateway"]);
    let mut exchanges = observed("worker", Agent::Unloaded);
    exchanges.extend([
        command("enable", "worker"),
        mac.0.bootstrap(
            "worker",
            reply(
                5,
                "",
                &launchd_fixture("bootstrap-io-error.stderr", WORKER, ""),
            ),
        ),
    ]);
    let recorded = Recorded::new(exchanges);
    let error = start(mac.services(&recorded).as_ref()).unwrap_err();
    assert_eq!(
        error.python_line(),
        "RuntimeError: native service command failed (/bin/launchctl bootstrap)"
    );
    assert_eq!(recorded.unused(), 0, "the gateway is not touched");
}

#[test]
fn suppress_disables_every_installed_agent_gateway_first() {
    let mac = Mac::with_plists(&["worker", "gateway"]);
    let mut exchanges = snapshot(Agent::Running(4242), Agent::Running(4343));
    exchanges.push(command("disable", "gateway"));
    exchanges.extend(snapshot(Agent::Running(4242), Agent::Unloaded));
    exchanges.push(command("disable", "worker"));
    let recorded = Recorded::new(exchanges);
    suppress(mac.services(&recorded).as_ref()).unwrap();
    assert_eq!(recorded.unused(), 0);
    // An agent with neither plist nor job is absent: nothing to disable.
    let mac = Mac::with_plists(&["worker"]);
    let mut exchanges = snapshot(Agent::Unloaded, Agent::Unloaded);
    exchanges.extend(snapshot(Agent::Unloaded, Agent::Unloaded));
    exchanges.push(command("disable", "worker"));
    let recorded = Recorded::new(exchanges);
    suppress(mac.services(&recorded).as_ref()).unwrap();
    assert_eq!(recorded.unused(), 0);
}

#[test]
fn snapshot_reports_the_gateway_of_a_launchd_host() {
    let mac = Mac::with_plists(&["worker", "gateway"]);
    let disabled = launchd_print_disabled(&[(GATEWAY, "disabled")]);
    let mut exchanges = observed("worker", Agent::Running(4242));
    exchanges.push(expect(
        &["/bin/launchctl", "print-disabled", &domain()],
        reply(0, &disabled, ""),
    ));
    exchanges.push(expect(
        &["/bin/launchctl", "print", &target("gateway")],
        reply(
            113,
            "",
            &launchd_fixture("print-not-found.stderr", GATEWAY, ""),
        ),
    ));
    let recorded = Recorded::new(exchanges);
    let gateway = mac.services(&recorded).role_snapshot("gateway").unwrap();
    // install.sh receives `stopped|false` for `begin --gateway-state/-enabled`.
    assert_eq!(
        python_compat::json::encode_line(&Json::Object(gateway), false),
        r#"{"state": "stopped", "enabled": false}"#
    );
}
