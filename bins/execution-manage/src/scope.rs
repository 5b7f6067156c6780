//! Which services an activation replaces: `migration` (a first split install,
//! both), `gateway` or `worker` (one component, the other retained). Parsed
//! once, from the command line (argparse's `choices=`) or a loaded journal.

use agents_common::{Error, Named, Result, Role};

/// One activation scope (`apply --scope`, the journal's `scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `migration`: the first split install; both services are replaced.
    Migration,
    /// `gateway`: only the gateway is replaced; the worker is retained.
    Gateway,
    /// `worker`: only the worker is replaced; the gateway is retained.
    Worker,
}

impl Scope {
    /// The originals' `choices=` order.
    pub const ALL: [Scope; 3] = [Scope::Migration, Scope::Gateway, Scope::Worker];

    /// The originals' spelling, as journals and results record it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Migration => "migration",
            Scope::Gateway => "gateway",
            Scope::Worker => "worker",
        }
    }

    /// Reads a scope name; anything else is ValueError `unknown execution
    /// activation scope`.
    pub fn parse(name: &str) -> Result<Scope> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == name)
            .ok_or_else(|| Error::value("unknown execution activation scope"))
    }

    /// Whether the activation stops and replaces the worker.
    pub fn replaces_worker(self) -> bool {
        self != Scope::Gateway
    }

    /// Whether the activation stops and replaces the gateway.
    pub fn replaces_gateway(self) -> bool {
        self != Scope::Worker
    }

    /// The roles the activation replaces, worker first.
    pub fn roles(self) -> &'static [Role] {
        match self {
            Scope::Migration => &[Role::Worker, Role::Gateway],
            Scope::Gateway => &[Role::Gateway],
            Scope::Worker => &[Role::Worker],
        }
    }
}

impl Named for Scope {
    fn parse(name: &str) -> Result<Scope> {
        Scope::parse(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_refused() {
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()).unwrap(), scope);
        }
        for bad in ["", "Worker", "both", "gateway "] {
            assert_eq!(
                Scope::parse(bad).unwrap_err().python_line(),
                "ValueError: unknown execution activation scope"
            );
        }
        assert_eq!(Scope::Migration.roles(), &[Role::Worker, Role::Gateway]);
        assert!(Scope::Worker.replaces_worker() && !Scope::Worker.replaces_gateway());
        assert!(Scope::Gateway.replaces_gateway() && !Scope::Gateway.replaces_worker());
    }
}
