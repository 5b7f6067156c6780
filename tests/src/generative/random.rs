//! SplitMix64: a tiny generator whose sequence is fixed by its seed on
//! every platform, so a `(seed, index)` names the same scenario everywhere.

/// The campaign's pseudo-random source.
#[derive(Debug, Clone)]
pub(super) struct Random {
    state: u64,
}

impl Random {
    /// The generator of scenario `index` of campaign `seed`.
    pub(super) fn for_scenario(seed: u64, index: u64) -> Random {
        let mut mixer = Random {
            state: seed ^ 0x5851_F42D_4C95_7F2D,
        };
        let base = mixer.next_u64();
        Random {
            state: base ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }

    /// The next 64 random bits.
    pub(super) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub(super) fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    /// A number in `low..=high`.
    pub(super) fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    /// One of `choices` (not empty).
    pub(super) fn pick<T: Clone>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len())].clone()
    }

    /// True `numerator` times in `denominator`.
    pub(super) fn chance(&mut self, numerator: usize, denominator: usize) -> bool {
        self.below(denominator) < numerator
    }
}

#[cfg(test)]
mod tests {
    use super::Random;

    #[test]
    fn a_scenario_seed_names_one_sequence() {
        let mut first = Random::for_scenario(7, 3);
        let mut again = Random::for_scenario(7, 3);
        let mut other = Random::for_scenario(7, 4);
        let a: Vec<u64> = (0..4).map(|_| first.next_u64()).collect();
        let b: Vec<u64> = (0..4).map(|_| again.next_u64()).collect();
        let c: Vec<u64> = (0..4).map(|_| other.next_u64()).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Fixed forever: recorded facts name scenarios by (seed, index).
        assert_eq!(Random::for_scenario(1, 0).next_u64(), FIRST_OF_SEED_1);
    }

    const FIRST_OF_SEED_1: u64 = 11_015_502_686_040_571_573;
}
