//! No input makes the parser panic: a seeded generator of Python-shaped
//! and hostile sources (keywords, brackets left open or closed twice,
//! every string prefix and quote, escapes, numbers with odd underscores,
//! indentation with tabs and spaces, continuation lines, BOMs, coding
//! cookies, NUL and undecodable bytes) and random bytes. A panic on the
//! parser's thread fails `module_constants`' join, so each case proves the
//! parse ended in a result. The release helpers abort on panic; this is the
//! evidence that no source reaches one (and execution-activation still ends
//! with one line if one does).

use super::module_constants;

/// xorshift64*: deterministic, so a failing case is reproducible by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

const PIECES: &[&[u8]] = &[
    b"API_CONTRACT_VERSION",
    b" = ",
    b"7",
    b"-1",
    b"0x_1",
    b"1__0",
    b"1e",
    b"0o8",
    b"1j",
    b".5",
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b":",
    b";",
    b".",
    b"...",
    b"->",
    b":=",
    b"**",
    b"*",
    b"@",
    b"|",
    b"lambda",
    b" if ",
    b" else ",
    b"for ",
    b" in ",
    b"def ",
    b"class ",
    b"async ",
    b"await ",
    b"yield ",
    b"return",
    b"match ",
    b"case ",
    b"_",
    b"import ",
    b"from ",
    b"global ",
    b"del ",
    b"with ",
    b"try:",
    b"except*",
    b"finally:",
    b"not ",
    b" and ",
    b" or ",
    b"'",
    b"\"",
    b"'''",
    b"\"\"\"",
    b"f'",
    b"rb'",
    b"u\"",
    b"f'{",
    b"}'",
    b"{x!r:>{w}}",
    b"\\",
    b"\\N{",
    b"\\x",
    b"\\u12",
    b"\\U0010ffff",
    b"\\777",
    b"#",
    b" # comment",
    b"\n",
    b"\r\n",
    b"\r",
    b"\t",
    b"    ",
    b"  ",
    b"\x0c",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xef\xbb\xbf",
    b"# -*- coding: latin-1 -*-\n",
    b"# coding: utf-8\n",
    b"# coding: nope\n",
    b"\xe2\x80\x8b",
    b"\xd9\xa3",
    b"x",
    b"y1",
    b"\xc3\xa9t\xc3\xa9",
    b"True",
    b"None",
    b"print",
    b"=",
    b"==",
    b"!=",
    b"<>",
    b"$",
    b"?",
    b"`",
    b"!",
    b"\\\n",
    b"pass",
    b"if x:\n",
    b"else:\n",
];

fn generated(rng: &mut Rng) -> Vec<u8> {
    let mut source = Vec::new();
    if rng.below(8) == 0 {
        // Plain random bytes now and then.
        for _ in 0..rng.below(300) {
            source.push(rng.next() as u8);
        }
        return source;
    }
    for _ in 0..rng.below(120) {
        source.extend_from_slice(PIECES[rng.below(PIECES.len())]);
    }
    // Deep nesting, just past and below what the grammar accepts.
    if rng.below(20) == 0 {
        let depth = 190 + rng.below(20);
        let open = PIECES[4 + 2 * rng.below(3)];
        for _ in 0..depth {
            source.extend_from_slice(open);
        }
    }
    source
}

#[test]
fn no_generated_source_makes_the_parser_panic() {
    let cases: usize = std::env::var("PYTHON_SOURCE_FUZZ_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000);
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..cases {
        let source = generated(&mut rng);
        match module_constants(&source, "API_CONTRACT_VERSION").outcome {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    // Both outcomes occur, so the generator reaches past the first refusal.
    assert!(
        accepted > cases / 100 && refused > cases / 2,
        "{accepted} accepted, {refused} refused"
    );
}
