//! The generative differential campaign (docs/design/upstream-comparison.md,
//! "Generated scenarios"): seeded random scenarios for the five helpers,
//! the originals on the upstream modules against the binaries
//! (`scripts/generative-compare.sh`), and the recorded originals' facts
//! replayed against the binaries in the normal suite.

use agents_tests::generative::{
    Bench, Campaign, Difference, Facts, RecordedScenario, Reference, Scenario, SideRun, Tally,
    Verdict,
};
use agents_tests::upstream::{Upstream, RECORD_ENV};
use agents_tests::Sandbox;

/// How many scenarios the comparison runs (from [`FROM_ENV`]).
const COUNT_ENV: &str = "AGENTS_GENERATIVE_COUNT";
/// The first scenario's index.
const FROM_ENV: &str = "AGENTS_GENERATIVE_FROM";
/// The campaign's seed.
const SEED_ENV: &str = "AGENTS_GENERATIVE_SEED";
/// The seed the recorded facts use.
const RECORDED_SEED: u64 = 1;
/// The least number of recorded scenarios the suite replays.
const LEAST_REPLAYED: usize = 1_000;

fn number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |text| {
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text}: not a number"))
    })
}

fn campaign(test: &str, upstream: Upstream) -> Option<Campaign> {
    let sandbox = Sandbox::start_or_skip(test)?;
    Some(Campaign {
        bench: Bench::new(sandbox, upstream),
    })
}

/// What the comparison with the originals found so far.
struct Findings {
    tally: Tally,
    /// The facts of every scenario that does not differ.
    facts: Facts,
    /// Each difference with its minimal reproduction.
    differences: Vec<Difference>,
    /// Scenarios whose generated state the fixtures could not build.
    harness_failures: usize,
}

impl Findings {
    fn new(seed: u64) -> Findings {
        Findings {
            tally: Tally::default(),
            facts: Facts {
                seed,
                scenarios: Vec::new(),
            },
            differences: Vec::new(),
            harness_failures: 0,
        }
    }

    /// Runs scenario `index` on both sides and records what it shows.
    fn compare(&mut self, campaign: &Campaign, scenario: &Scenario, index: u64) {
        // A fixture that cannot build a generated state is the harness's
        // failure: reported with the scenario, and the campaign goes on.
        let compared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            campaign.compare(scenario, Reference::Original, SideRun::Port)
        }));
        let Ok((verdict, original, port)) = compared else {
            println!(
                "\ngenerative-compare harness failure: {}\n{scenario}",
                scenario.name()
            );
            self.harness_failures += 1;
            return;
        };
        self.tally.count(scenario, &verdict);
        if let Verdict::Listed(names) = &verdict {
            println!(
                "generative-compare listed: {}: {}",
                scenario.name(),
                names.join(", ")
            );
        }
        match &verdict {
            Verdict::Differs(facets) => {
                let difference = campaign.investigate(
                    scenario,
                    facets.clone(),
                    Reference::Original,
                    SideRun::Port,
                );
                println!("\ngenerative-compare difference: {difference}");
                self.differences.push(difference);
            }
            _ => self.facts.scenarios.push(RecordedScenario {
                index,
                fingerprint: scenario.fingerprint(),
                verdict: verdict.recorded(),
                // A listed scenario's facts are the port's, whose every
                // difference from the original was just found listed.
                observed: Facts::condense(if verdict == Verdict::Same {
                    &original
                } else {
                    &port
                }),
            }),
        }
    }
}

/// Runs [`COUNT_ENV`] scenarios of [`SEED_ENV`] on both sides and reports
/// each difference with its minimal reproduction and the campaign's
/// figures; with [`RECORD_ENV`], writes the facts of every scenario that
/// does not differ (the normal suite replays them).
#[test]
#[ignore = "compares with the originals: run by scripts/generative-compare.sh"]
fn generated_scenarios_against_the_originals() {
    let Some(upstream) = Upstream::locate(agents_tests::test_name!()) else {
        return;
    };
    let Some(campaign) = campaign(agents_tests::test_name!(), upstream) else {
        return;
    };
    let seed = number(SEED_ENV, RECORDED_SEED);
    let from = number(FROM_ENV, 0);
    let count = number(COUNT_ENV, LEAST_REPLAYED as u64);
    let mut findings = Findings::new(seed);
    for index in from..from + count {
        findings.compare(&campaign, &Scenario::generate(seed, index), index);
        if (index + 1 - from) % 100 == 0 {
            println!(
                "generative-compare progress: {} scenarios",
                index + 1 - from
            );
        }
    }
    let Findings {
        tally,
        facts,
        differences,
        harness_failures,
    } = findings;
    println!(
        "\ngenerative-compare seed {seed}, scenarios {from}..{}:\n{tally}",
        from + count
    );
    if std::env::var_os(RECORD_ENV).is_some() {
        facts.write();
        println!(
            "generative-compare: recorded {} scenarios",
            facts.scenarios.len()
        );
    }
    assert!(
        differences.is_empty() && harness_failures == 0,
        "{} scenarios differ, {harness_failures} could not be built",
        differences.len()
    );
}

/// The binaries still do, in every recorded generated scenario, what the
/// originals did (`tests/fixtures/generative/campaign.facts`).
#[test]
fn generated_scenarios_as_recorded() {
    let Some(campaign) = campaign(agents_tests::test_name!(), Upstream::port_only()) else {
        return;
    };
    let facts = Facts::load();
    assert!(
        facts.scenarios.len() >= LEAST_REPLAYED,
        "only {} scenarios recorded",
        facts.scenarios.len()
    );
    let mut differing = Vec::new();
    for recorded in &facts.scenarios {
        let scenario = Scenario::generate(facts.seed, recorded.index);
        if let Verdict::Differs(facets) = campaign.replay(recorded, &scenario, SideRun::Port) {
            differing.push(format!(
                "{}: {}\n{scenario}",
                scenario.name(),
                facets.join(", ")
            ));
        }
    }
    assert!(
        differing.is_empty(),
        "the binaries no longer do what the originals did in {} generated scenarios \
         (rerun them with scripts/generative-compare.sh):\n{}",
        differing.len(),
        differing.join("\n")
    );
}

/// The campaign can fail: a debug build told to name `FileNotFoundError`
/// `OSError` is reported, against the recorded originals, in a scenario
/// where the original raised `FileNotFoundError`, and shrunk (against the
/// clean binary, which matched the original there) to a reproduction
/// that still shows the wrong class and from which nothing more can go.
#[test]
fn an_injected_wrong_error_class_is_reported_with_its_minimal_reproduction() {
    if !cfg!(debug_assertions) {
        agents_tests::skip(
            agents_tests::test_name!(),
            "the injected fault exists only in debug builds",
        );
        return;
    }
    let Some(campaign) = campaign(agents_tests::test_name!(), Upstream::port_only()) else {
        return;
    };
    let facts = Facts::load();
    let recorded = facts
        .scenarios
        .iter()
        .filter(|recorded| {
            recorded.observed.facets().iter().any(|(facet, value)| {
                facet.ends_with(" stderr") && value.starts_with("FileNotFoundError: ")
            })
        })
        .max_by_key(|recorded| Scenario::generate(facts.seed, recorded.index).size())
        .expect("a recorded scenario where the original raised FileNotFoundError");
    let scenario = Scenario::generate(facts.seed, recorded.index);
    assert_eq!(
        campaign.replay(recorded, &scenario, SideRun::Port),
        Verdict::Same,
        "the clean binary matches the recorded original"
    );
    let Verdict::Differs(facets) = campaign.replay(recorded, &scenario, SideRun::Injected) else {
        panic!(
            "the injected wrong class went unreported in {}",
            scenario.name()
        );
    };
    assert!(
        facets.iter().any(|facet| facet.ends_with(" stderr")),
        "{facets:?}"
    );
    let difference = campaign.investigate(&scenario, facets, Reference::Port, SideRun::Injected);
    println!("{difference}");
    assert!(difference.deterministic);
    assert!(difference.minimal.size() <= scenario.size());
    assert!(
        difference.minimal.invocations.len() == 1,
        "{}",
        difference.minimal
    );
    assert!(
        difference
            .minimal_facets
            .iter()
            .any(|(facet, reference, tested)| {
                facet.ends_with(" stderr")
                    && reference
                        .as_deref()
                        .is_some_and(|line| line.starts_with("FileNotFoundError: "))
                    && tested
                        .as_deref()
                        .is_some_and(|line| line.starts_with("OSError: "))
            }),
        "{difference}"
    );
    for smaller in difference.minimal.smaller() {
        assert!(
            !matches!(
                campaign
                    .compare(&smaller, Reference::Port, SideRun::Injected)
                    .0,
                Verdict::Differs(_)
            ),
            "not minimal: {smaller}"
        );
    }
}

/// How many commands the scenarios [`FROM_ENV`]..+[`COUNT_ENV`] of
/// [`SEED_ENV`] run per side (for figures of runs split across processes).
#[test]
#[ignore = "figures: the campaign's command count of a range"]
fn generated_command_count() {
    let seed = number(SEED_ENV, RECORDED_SEED);
    let from = number(FROM_ENV, 0);
    let count = number(COUNT_ENV, LEAST_REPLAYED as u64);
    let commands: usize = (from..from + count)
        .map(|index| Scenario::generate(seed, index).invocations.len())
        .sum();
    println!(
        "generative-compare commands: seed {seed}, scenarios {from}..{}: {commands}",
        from + count
    );
}
