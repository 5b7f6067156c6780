//! `match` statement patterns.

use super::{alt, t, Const, Kw, Node, Op, Parser, Rule, Tk, PR};

impl Parser<'_> {
    /// `patterns: open_sequence_pattern | pattern`
    pub(super) fn patterns(&mut self) -> PR<()> {
        alt!(self, |p| p.open_sequence_pattern());
        alt!(self, |p| p.pattern());
        Ok(None)
    }

    /// `pattern: as_pattern | or_pattern`
    pub(super) fn pattern(&mut self) -> PR<()> {
        alt!(self, |p| p.as_pattern());
        alt!(self, |p| p.or_pattern());
        Ok(None)
    }

    /// `as_pattern: or_pattern 'as' pattern_capture_target | invalid_as_pattern`
    fn as_pattern(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.or_pattern());
            t!(p.kw(Kw::As));
            p.pattern_capture_target()
        });
        if self.invalid {
            alt!(self, |p| {
                t!(p.or_pattern());
                t!(p.kw(Kw::As));
                t!(p.soft(b"_"));
                Err(p.raise_syntax("cannot use '_' as a target"))
            });
            alt!(self, |p| {
                t!(p.or_pattern());
                t!(p.kw(Kw::As));
                if p.at(Tk::Name)? {
                    return Ok(None);
                }
                t!(p.expression());
                Err(p.raise_syntax("invalid pattern target"))
            });
        }
        Ok(None)
    }

    /// `or_pattern: '|'.closed_pattern+`
    pub(super) fn or_pattern(&mut self) -> PR<()> {
        Ok(self.gather(Op::VBar, |p| p.closed_pattern())?.map(|_| ()))
    }

    /// `closed_pattern (memo)`
    fn closed_pattern(&mut self) -> PR<u32> {
        self.nested(|p| {
            p.memo(Rule::ClosedPattern, |p| {
                alt!(p, |p| p.literal());
                alt!(p, |p| Ok(p.pattern_capture_target()?.map(|_| 0)));
                alt!(p, |p| Ok(p.soft(b"_")?.map(|_| 0)));
                alt!(p, |p| {
                    t!(p.attr());
                    Ok((!p.at_capture_end()?).then_some(0))
                });
                // group_pattern
                alt!(p, |p| {
                    t!(p.op(Op::LPar));
                    t!(p.pattern());
                    t!(p.op(Op::RPar));
                    Ok(Some(0))
                });
                alt!(p, |p| Ok(p.sequence_pattern()?.map(|_| 0)));
                alt!(p, |p| Ok(p.mapping_pattern()?.map(|_| 0)));
                alt!(p, |p| Ok(p.class_pattern()?.map(|_| 0)));
                Ok(None)
            })
        })
    }

    /// `&('.' | '(' | '=')`
    fn at_capture_end(&mut self) -> Result<bool, super::Abort> {
        Ok(matches!(
            self.peek()?.kind,
            Tk::Op(Op::Dot | Op::LPar | Op::Equal)
        ))
    }

    /// `literal_pattern`, and `literal_expr` (the same alternatives).
    fn literal(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.signed_number());
            Ok((!matches!(p.peek()?.kind, Tk::Op(Op::Plus | Op::Minus))).then_some(0))
        });
        alt!(self, |p| p.complex_number());
        alt!(self, |p| p.strings());
        alt!(self, |p| Ok(p.kw(Kw::None)?.map(|_| 0)));
        alt!(self, |p| Ok(p.kw(Kw::True)?.map(|_| 0)));
        alt!(self, |p| Ok(p.kw(Kw::False)?.map(|_| 0)));
        Ok(None)
    }

    /// `complex_number: signed_real_number ('+' | '-') imaginary_number`
    fn complex_number(&mut self) -> PR<u32> {
        for sign in [Op::Plus, Op::Minus] {
            alt!(self, |p| {
                t!(p.signed_real_number());
                t!(p.op(sign));
                let imaginary = t!(p.number());
                if !matches!(p.nodes[imaginary as usize], Node::Const(Const::Complex)) {
                    return Err(p.raise_syntax("imaginary number required in complex literal"));
                }
                Ok(Some(0))
            });
        }
        Ok(None)
    }

    /// `signed_number: NUMBER | '-' NUMBER`
    fn signed_number(&mut self) -> PR<u32> {
        alt!(self, |p| p.number());
        alt!(self, |p| {
            t!(p.op(Op::Minus));
            p.number()
        });
        Ok(None)
    }

    /// `signed_real_number: real_number | '-' real_number`
    fn signed_real_number(&mut self) -> PR<u32> {
        alt!(self, |p| p.real_number());
        alt!(self, |p| {
            t!(p.op(Op::Minus));
            p.real_number()
        });
        Ok(None)
    }

    /// `real_number: NUMBER` (`_PyPegen_ensure_real`)
    fn real_number(&mut self) -> PR<u32> {
        let number = t!(self.number());
        if matches!(self.nodes[number as usize], Node::Const(Const::Complex)) {
            return Err(self.raise_syntax("real number required in complex literal"));
        }
        Ok(Some(number))
    }

    /// `pattern_capture_target: !"_" NAME !('.' | '(' | '=')`
    fn pattern_capture_target(&mut self) -> PR<()> {
        self.alt(|p| {
            if p.lookahead(|p| p.soft(b"_"))? {
                return Ok(None);
            }
            t!(p.expect(Tk::Name));
            Ok((!p.at_capture_end()?).then_some(()))
        })
    }

    /// `attr: name_or_attr '.' NAME` (left-recursive through `name_or_attr`).
    fn attr(&mut self) -> PR<u32> {
        self.memo(Rule::Attr, |p| {
            t!(p.expect(Tk::Name));
            let mut dotted = false;
            loop {
                let step = p.alt(|p| {
                    t!(p.op(Op::Dot));
                    p.expect(Tk::Name)
                })?;
                if step.is_none() {
                    break;
                }
                dotted = true;
            }
            Ok(dotted.then_some(0))
        })
    }

    /// `name_or_attr: attr | NAME`
    fn name_or_attr(&mut self) -> PR<()> {
        alt!(self, |p| Ok(p.attr()?.map(|_| ())));
        alt!(self, |p| Ok(p.expect(Tk::Name)?.map(|_| ())));
        Ok(None)
    }

    /// `sequence_pattern: '[' maybe_sequence_pattern? ']' | '(' open_sequence_pattern? ')'`
    fn sequence_pattern(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.op(Op::LSqb));
            p.opt(|p| p.maybe_sequence_pattern())?;
            t!(p.op(Op::RSqb));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            p.opt(|p| p.open_sequence_pattern())?;
            t!(p.op(Op::RPar));
            Ok(Some(()))
        });
        Ok(None)
    }

    /// `open_sequence_pattern: maybe_star_pattern ',' maybe_sequence_pattern?`
    fn open_sequence_pattern(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.maybe_star_pattern());
            t!(p.op(Op::Comma));
            p.opt(|p| p.maybe_sequence_pattern())?;
            Ok(Some(()))
        })
    }

    /// `maybe_sequence_pattern: ','.maybe_star_pattern+ ','?`
    fn maybe_sequence_pattern(&mut self) -> PR<()> {
        t!(self.gather(Op::Comma, |p| p.maybe_star_pattern()));
        self.opt(|p| p.op(Op::Comma))?;
        Ok(Some(()))
    }

    /// `maybe_star_pattern: star_pattern | pattern`
    fn maybe_star_pattern(&mut self) -> PR<()> {
        alt!(self, |p| p.star_pattern());
        alt!(self, |p| p.pattern());
        Ok(None)
    }

    /// `star_pattern (memo): '*' pattern_capture_target | '*' wildcard_pattern`
    fn star_pattern(&mut self) -> PR<()> {
        let found = self.memo(Rule::StarPattern, |p| {
            alt!(p, |p| {
                t!(p.op(Op::Star));
                Ok(p.pattern_capture_target()?.map(|_| 0))
            });
            alt!(p, |p| {
                t!(p.op(Op::Star));
                Ok(p.soft(b"_")?.map(|_| 0))
            });
            Ok(None)
        })?;
        Ok(found.map(|_| ()))
    }

    /// `mapping_pattern`
    fn mapping_pattern(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            t!(p.op(Op::RBrace));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            t!(p.double_star_pattern());
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RBrace));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            t!(p.items_pattern());
            t!(p.op(Op::Comma));
            t!(p.double_star_pattern());
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RBrace));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            t!(p.items_pattern());
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RBrace));
            Ok(Some(()))
        });
        Ok(None)
    }

    /// `items_pattern: ','.key_value_pattern+`
    fn items_pattern(&mut self) -> PR<()> {
        Ok(self
            .gather(Op::Comma, |p| {
                let key = p.alt(|p| p.literal())?;
                if key.is_none() {
                    t!(p.attr());
                }
                t!(p.op(Op::Colon));
                p.pattern()
            })?
            .map(|_| ()))
    }

    /// `double_star_pattern: '**' pattern_capture_target`
    fn double_star_pattern(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.op(Op::DoubleStar));
            p.pattern_capture_target()
        })
    }

    /// `class_pattern`
    fn class_pattern(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.name_or_attr());
            t!(p.op(Op::LPar));
            t!(p.op(Op::RPar));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.name_or_attr());
            t!(p.op(Op::LPar));
            t!(p.positional_patterns());
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RPar));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.name_or_attr());
            t!(p.op(Op::LPar));
            t!(p.keyword_patterns());
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RPar));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.name_or_attr());
            t!(p.op(Op::LPar));
            t!(p.positional_patterns());
            t!(p.op(Op::Comma));
            t!(p.keyword_patterns());
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RPar));
            Ok(Some(()))
        });
        if self.invalid {
            alt!(self, |p| {
                t!(p.name_or_attr());
                t!(p.op(Op::LPar));
                // invalid_class_argument_pattern:
                // [positional_patterns ','] keyword_patterns ',' positional_patterns
                p.opt(|p| {
                    t!(p.positional_patterns());
                    p.op(Op::Comma)
                })?;
                t!(p.keyword_patterns());
                t!(p.op(Op::Comma));
                t!(p.positional_patterns());
                Err(p.raise_syntax("positional patterns follow keyword patterns"))
            });
        }
        Ok(None)
    }

    /// `positional_patterns: ','.pattern+`
    fn positional_patterns(&mut self) -> PR<()> {
        Ok(self.gather(Op::Comma, |p| p.pattern())?.map(|_| ()))
    }

    /// `keyword_patterns: ','.(NAME '=' pattern)+`
    fn keyword_patterns(&mut self) -> PR<()> {
        Ok(self
            .gather(Op::Comma, |p| {
                t!(p.expect(Tk::Name));
                t!(p.op(Op::Equal));
                p.pattern()
            })?
            .map(|_| ()))
    }
}
