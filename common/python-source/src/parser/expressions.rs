//! Expressions: CPython 3.11's `expressions` down to `atom`, literals,
//! displays, comprehensions, lambdas and call arguments.

use super::{alt, t, Const, Kind, Kw, Node, Op, Parser, Rule, Tk, PR};

/// One item of `kwargs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KwItem {
    Keyword,
    Starred,
    DoubleStarred,
}

impl Parser<'_> {
    /// `expressions: expression (',' expression)+ [','] | expression ',' | expression`
    pub(super) fn expressions(&mut self) -> PR<u32> {
        self.item_or_tuple(Self::expression)
    }

    /// `item (',' item)+ [','] | item ',' | item`: the tuple of the items
    /// when there is a comma, else the one item.
    fn item_or_tuple(&mut self, item: fn(&mut Self) -> PR<u32>) -> PR<u32> {
        let first = t!(item(self));
        let mut items = vec![first];
        items.extend(self.repeat(|p| {
            t!(p.op(Op::Comma));
            item(p)
        })?);
        if items.len() > 1 {
            self.opt(|p| p.op(Op::Comma))?;
            return Ok(Some(self.tuple(&items)));
        }
        if self.op(Op::Comma)?.is_some() {
            return Ok(Some(self.tuple(&items)));
        }
        Ok(Some(first))
    }

    /// `expression (memo)`
    pub(super) fn expression(&mut self) -> PR<u32> {
        self.nested(|p| {
            p.memo(Rule::Expression, |p| {
                if p.invalid {
                    alt!(p, |p| p.invalid_expression());
                    alt!(p, |p| p.invalid_legacy_expression());
                }
                alt!(p, |p| p.if_expression());
                alt!(p, |p| p.disjunction());
                alt!(p, |p| p.lambdef());
                Ok(None)
            })
        })
    }

    /// `disjunction 'if' disjunction 'else' expression`
    pub(super) fn if_expression(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.disjunction());
            t!(p.kw(Kw::If));
            t!(p.disjunction());
            t!(p.kw(Kw::Else));
            t!(p.expression());
            Ok(Some(p.other(Kind::IfExp)))
        })
    }

    /// `expression_without_invalid`
    pub(super) fn expression_without_invalid(&mut self) -> PR<u32> {
        self.without_invalid(|p| {
            alt!(p, |p| p.if_expression());
            alt!(p, |p| p.disjunction());
            alt!(p, |p| p.lambdef());
            Ok(None)
        })
    }

    /// `yield_expr: 'yield' 'from' expression | 'yield' [star_expressions]`
    pub(super) fn yield_expr(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.kw(Kw::Yield));
            t!(p.kw(Kw::From));
            t!(p.expression());
            Ok(Some(p.other(Kind::Yield)))
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Yield));
            p.opt(|p| p.star_expressions())?;
            Ok(Some(p.other(Kind::Yield)))
        });
        Ok(None)
    }

    /// `star_expressions`
    pub(super) fn star_expressions(&mut self) -> PR<u32> {
        self.item_or_tuple(Self::star_expression)
    }

    /// `star_expression (memo): '*' bitwise_or | expression`
    pub(super) fn star_expression(&mut self) -> PR<u32> {
        self.memo(Rule::StarExpression, |p| {
            alt!(p, |p| {
                t!(p.op(Op::Star));
                let value = t!(p.bitwise_or());
                Ok(Some(p.node(Node::Starred(value))))
            });
            alt!(p, |p| p.expression());
            Ok(None)
        })
    }

    /// `star_named_expressions: ','.star_named_expression+ [',']`
    pub(super) fn star_named_expressions(&mut self) -> PR<Vec<u32>> {
        let items = t!(self.gather(Op::Comma, |p| p.star_named_expression()));
        self.opt(|p| p.op(Op::Comma))?;
        Ok(Some(items))
    }

    /// `star_named_expression: '*' bitwise_or | named_expression`
    pub(super) fn star_named_expression(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.op(Op::Star));
            let value = t!(p.bitwise_or());
            Ok(Some(p.node(Node::Starred(value))))
        });
        alt!(self, |p| p.named_expression());
        Ok(None)
    }

    /// `assignment_expression: NAME ':=' ~ expression`
    pub(super) fn assignment_expression(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.expect(Tk::Name));
            t!(p.op(Op::ColonEqual));
            t!(p.expression());
            Ok(Some(p.other(Kind::NamedExpr)))
        })
    }

    /// `named_expression: assignment_expression | invalid_named_expression | expression !':='`
    pub(super) fn named_expression(&mut self) -> PR<u32> {
        alt!(self, |p| p.assignment_expression());
        if self.invalid {
            alt!(self, |p| p.invalid_named_expression());
        }
        alt!(self, |p| {
            let value = t!(p.expression());
            Ok((!p.at_op(Op::ColonEqual)?).then_some(value))
        });
        Ok(None)
    }

    /// `disjunction (memo): conjunction ('or' conjunction)+ | conjunction`
    pub(super) fn disjunction(&mut self) -> PR<u32> {
        self.memo(Rule::Disjunction, |p| {
            p.bool_chain(Kw::Or, Self::conjunction)
        })
    }

    /// `conjunction (memo): inversion ('and' inversion)+ | inversion`
    fn conjunction(&mut self) -> PR<u32> {
        self.memo(Rule::Conjunction, |p| {
            p.bool_chain(Kw::And, Self::inversion)
        })
    }

    fn bool_chain(&mut self, keyword: Kw, operand: fn(&mut Self) -> PR<u32>) -> PR<u32> {
        let first = t!(operand(self));
        let mut more = false;
        loop {
            let next = self.alt(|p| {
                t!(p.kw(keyword));
                operand(p)
            })?;
            if next.is_none() {
                break;
            }
            more = true;
        }
        Ok(Some(if more {
            self.other(Kind::BoolOp)
        } else {
            first
        }))
    }

    /// `inversion (memo): 'not' inversion | comparison`
    fn inversion(&mut self) -> PR<u32> {
        self.nested(|p| {
            p.memo(Rule::Inversion, |p| {
                alt!(p, |p| {
                    t!(p.kw(Kw::Not));
                    t!(p.inversion());
                    Ok(Some(p.other(Kind::UnaryOp)))
                });
                alt!(p, |p| p.comparison());
                Ok(None)
            })
        })
    }

    /// `comparison: bitwise_or compare_op_bitwise_or_pair+ | bitwise_or`
    fn comparison(&mut self) -> PR<u32> {
        let left = t!(self.bitwise_or());
        let mut first_in = None;
        loop {
            let pair = self.alt(|p| p.compare_op_bitwise_or_pair())?;
            match pair {
                Some(is_in) => {
                    first_in.get_or_insert(is_in);
                }
                None => break,
            }
        }
        Ok(Some(match first_in {
            Some(first_in) => self.node(Node::Compare { left, first_in }),
            None => left,
        }))
    }

    /// One comparison operator and its right operand; whether it is `in`.
    fn compare_op_bitwise_or_pair(&mut self) -> PR<bool> {
        let token = self.peek()?.kind;
        let is_in = match token {
            Tk::Op(Op::EqEqual | Op::NotEqual | Op::LessEqual | Op::Less)
            | Tk::Op(Op::GreaterEqual | Op::Greater) => {
                self.pos += 1;
                false
            }
            Tk::Kw(Kw::Not) => {
                self.pos += 1;
                if self.kw(Kw::In)?.is_none() {
                    return Ok(None);
                }
                false
            }
            Tk::Kw(Kw::In) => {
                self.pos += 1;
                true
            }
            Tk::Kw(Kw::Is) => {
                self.pos += 1;
                let mark = self.pos;
                if self.kw(Kw::Not)?.is_some() {
                    if self.bitwise_or()?.is_some() {
                        return Ok(Some(false));
                    }
                    self.pos = mark;
                }
                false
            }
            _ => return Ok(None),
        };
        t!(self.bitwise_or());
        Ok(Some(is_in))
    }

    /// `bitwise_or: bitwise_or '|' bitwise_xor | bitwise_xor`
    pub(super) fn bitwise_or(&mut self) -> PR<u32> {
        self.memo(Rule::BitwiseOr, |p| {
            p.binary_chain(&[Op::VBar], |p| {
                p.binary_chain(&[Op::Circumflex], |p| {
                    p.binary_chain(&[Op::Amper], |p| {
                        p.binary_chain(&[Op::LeftShift, Op::RightShift], |p| {
                            p.binary_chain(&[Op::Plus, Op::Minus], |p| {
                                p.binary_chain(
                                    &[Op::Star, Op::Slash, Op::DoubleSlash, Op::Percent, Op::At],
                                    Self::factor,
                                )
                            })
                        })
                    })
                })
            })
        })
    }

    /// A left-recursive binary rule (`sum: sum '+' term | ... | term`).
    fn binary_chain(&mut self, ops: &[Op], operand: impl Fn(&mut Self) -> PR<u32>) -> PR<u32> {
        let mut left = t!(operand(self));
        loop {
            let step = self.alt(|p| {
                let token = p.peek()?.kind;
                let Tk::Op(op) = token else { return Ok(None) };
                if !ops.contains(&op) {
                    return Ok(None);
                }
                p.pos += 1;
                operand(p)
            })?;
            if step.is_none() {
                break;
            }
            left = self.other(Kind::BinOp);
        }
        Ok(Some(left))
    }

    /// `factor (memo): '+' factor | '-' factor | '~' factor | power`
    fn factor(&mut self) -> PR<u32> {
        self.nested(|p| {
            p.memo(Rule::Factor, |p| {
                alt!(p, |p| {
                    let token = p.peek()?.kind;
                    if !matches!(token, Tk::Op(Op::Plus | Op::Minus | Op::Tilde)) {
                        return Ok(None);
                    }
                    p.pos += 1;
                    t!(p.factor());
                    Ok(Some(p.other(Kind::UnaryOp)))
                });
                alt!(p, |p| p.power());
                Ok(None)
            })
        })
    }

    /// `power: await_primary '**' factor | await_primary`
    fn power(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.await_primary());
            t!(p.op(Op::DoubleStar));
            t!(p.factor());
            Ok(Some(p.other(Kind::BinOp)))
        });
        alt!(self, |p| p.await_primary());
        Ok(None)
    }

    /// `await_primary (memo): AWAIT primary | primary`
    fn await_primary(&mut self) -> PR<u32> {
        self.memo(Rule::AwaitPrimary, |p| {
            alt!(p, |p| {
                t!(p.kw(Kw::Await));
                t!(p.primary());
                Ok(Some(p.other(Kind::Await)))
            });
            alt!(p, |p| p.primary());
            Ok(None)
        })
    }

    /// `primary`: an atom with its trailers (left-recursive).
    fn primary(&mut self) -> PR<u32> {
        self.memo(Rule::Primary, |p| {
            let mut node = t!(p.atom());
            loop {
                if p.alt(|p| {
                    t!(p.op(Op::Dot));
                    p.expect(Tk::Name)
                })?
                .is_some()
                {
                    node = p.other(Kind::Attribute);
                    continue;
                }
                if p.alt(|p| p.genexp())?.is_some() {
                    node = p.node(Node::Call {
                        nargs: 1,
                        kw_unpack: false,
                    });
                    continue;
                }
                let call = p.alt(|p| {
                    t!(p.op(Op::LPar));
                    let arguments = p.opt(|p| p.arguments())?;
                    t!(p.op(Op::RPar));
                    Ok(Some(arguments))
                })?;
                if let Some(arguments) = call {
                    node = p.call_node(arguments);
                    continue;
                }
                if p.alt(|p| {
                    t!(p.op(Op::LSqb));
                    t!(p.slices());
                    p.op(Op::RSqb)
                })?
                .is_some()
                {
                    node = p.other(Kind::Subscript);
                    continue;
                }
                break;
            }
            Ok(Some(node))
        })
    }

    /// A call with the arguments node `arguments` returned (or none).
    pub(super) fn call_node(&mut self, arguments: Option<u32>) -> u32 {
        match arguments.map(|node| self.nodes[node as usize]) {
            Some(Node::Call { nargs, kw_unpack }) => self.node(Node::Call { nargs, kw_unpack }),
            _ => self.node(Node::Call {
                nargs: 0,
                kw_unpack: false,
            }),
        }
    }

    /// `slices: slice !',' | ','.(slice | starred_expression)+ [',']`
    pub(super) fn slices(&mut self) -> PR<u32> {
        alt!(self, |p| {
            let slice = t!(p.slice());
            Ok((!p.at_op(Op::Comma)?).then_some(slice))
        });
        alt!(self, |p| {
            let items = t!(p.gather(Op::Comma, |p| {
                alt!(p, |p| p.slice());
                alt!(p, |p| p.starred_expression());
                Ok(None)
            }));
            p.opt(|p| p.op(Op::Comma))?;
            Ok(Some(p.tuple(&items)))
        });
        Ok(None)
    }

    /// `slice: [expression] ':' [expression] [':' [expression]] | named_expression`
    fn slice(&mut self) -> PR<u32> {
        alt!(self, |p| {
            p.opt(|p| p.expression())?;
            t!(p.op(Op::Colon));
            p.opt(|p| p.expression())?;
            p.opt(|p| {
                t!(p.op(Op::Colon));
                Ok(Some(p.opt(|p| p.expression())?))
            })?;
            Ok(Some(p.other(Kind::Slice)))
        });
        alt!(self, |p| p.named_expression());
        Ok(None)
    }

    /// `atom`
    pub(super) fn atom(&mut self) -> PR<u32> {
        let token = self.peek()?;
        match token.kind {
            Tk::Name => {
                self.pos += 1;
                Ok(Some(self.node(Node::Name(self.pos as u32 - 1))))
            }
            Tk::Kw(Kw::True) => {
                self.pos += 1;
                Ok(Some(self.node(Node::Const(Const::True))))
            }
            Tk::Kw(Kw::False) => {
                self.pos += 1;
                Ok(Some(self.node(Node::Const(Const::False))))
            }
            Tk::Kw(Kw::None) => {
                self.pos += 1;
                Ok(Some(self.node(Node::Const(Const::None))))
            }
            Tk::String => self.strings(),
            Tk::Number => self.number(),
            Tk::Op(Op::LPar) => {
                alt!(self, |p| p.tuple_display());
                alt!(self, |p| p.group());
                alt!(self, |p| p.genexp());
                Ok(None)
            }
            Tk::Op(Op::LSqb) => {
                alt!(self, |p| p.list_display());
                alt!(self, |p| p.listcomp());
                Ok(None)
            }
            Tk::Op(Op::LBrace) => {
                alt!(self, |p| p.dict());
                alt!(self, |p| p.set_display());
                alt!(self, |p| p.dictcomp());
                alt!(self, |p| p.setcomp());
                Ok(None)
            }
            Tk::Op(Op::Ellipsis) => {
                self.pos += 1;
                Ok(Some(self.node(Node::Const(Const::Ellipsis))))
            }
            _ => Ok(None),
        }
    }

    /// A NUMBER token (`_PyPegen_number_token`): decimal integers longer
    /// than Python's 4300-digit conversion limit are an error.
    pub(super) fn number(&mut self) -> PR<u32> {
        let token = t!(self.expect(Tk::Number));
        let text: Vec<u8> = self
            .text(token)
            .iter()
            .copied()
            .filter(|&byte| byte != b'_')
            .collect();
        let lower = text.to_ascii_lowercase();
        let constant = if lower.ends_with(b"j") {
            Const::Complex
        } else if lower.starts_with(b"0x") || lower.starts_with(b"0o") || lower.starts_with(b"0b") {
            Const::Int(token)
        } else if lower.iter().any(|&byte| matches!(byte, b'.' | b'e')) {
            Const::Float
        } else {
            if text[0] != b'0' && text.len() > 4300 {
                return Err(self.raise_syntax(format!(
                    "Exceeds the limit (4300 digits) for integer string conversion: value has {} digits; use sys.set_int_max_str_digits() to increase the limit - Consider hexadecimal for huge integer literals to avoid decimal conversion limits.",
                    text.len()
                )));
            }
            Const::Int(token)
        };
        Ok(Some(self.node(Node::Const(constant))))
    }

    /// `strings (memo): STRING+`, concatenated and checked.
    pub(super) fn strings(&mut self) -> PR<u32> {
        self.memo(Rule::Strings, |p| {
            let tokens = t!(p.repeat1(|p| p.expect(Tk::String)));
            let node = super::super::literals::concatenate(p, &tokens)?;
            Ok(Some(p.node(node)))
        })
    }

    /// `group: '(' (yield_expr | named_expression) ')' | invalid_group`
    fn group(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            let inner = p.alt(|p| p.yield_expr())?;
            let inner = match inner {
                Some(inner) => inner,
                None => t!(p.named_expression()),
            };
            t!(p.op(Op::RPar));
            Ok(Some(inner))
        });
        if self.invalid {
            alt!(self, |p| {
                t!(p.op(Op::LPar));
                t!(p.starred_expression());
                t!(p.op(Op::RPar));
                Err(p.raise_syntax("cannot use starred expression here"))
            });
            alt!(self, |p| {
                t!(p.op(Op::LPar));
                t!(p.op(Op::DoubleStar));
                t!(p.expression());
                t!(p.op(Op::RPar));
                Err(p.raise_syntax("cannot use double starred expression here"))
            });
        }
        Ok(None)
    }

    /// `lambdef: 'lambda' [lambda_params] ':' expression`
    pub(super) fn lambdef(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.kw(Kw::Lambda));
            p.opt(|p| p.params_of(true))?;
            t!(p.op(Op::Colon));
            t!(p.expression());
            Ok(Some(p.other(Kind::Lambda)))
        })
    }

    /// `list: '[' [star_named_expressions] ']'`
    pub(super) fn list_display(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.op(Op::LSqb));
            let items = p.opt(|p| p.star_named_expressions())?.unwrap_or_default();
            t!(p.op(Op::RSqb));
            Ok(Some(p.list(&items)))
        })
    }

    /// `tuple: '(' [star_named_expression ',' [star_named_expressions]] ')'`
    pub(super) fn tuple_display(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.op(Op::LPar));
            let items = p
                .opt(|p| {
                    let first = t!(p.star_named_expression());
                    t!(p.op(Op::Comma));
                    let rest = p.opt(|p| p.star_named_expressions())?.unwrap_or_default();
                    let mut items = vec![first];
                    items.extend(rest);
                    Ok(Some(items))
                })?
                .unwrap_or_default();
            t!(p.op(Op::RPar));
            Ok(Some(p.tuple(&items)))
        })
    }

    /// `set: '{' star_named_expressions '}'`
    fn set_display(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.op(Op::LBrace));
            t!(p.star_named_expressions());
            t!(p.op(Op::RBrace));
            Ok(Some(p.other(Kind::Set)))
        })
    }

    /// `dict: '{' [double_starred_kvpairs] '}' | '{' invalid_double_starred_kvpairs '}'`
    fn dict(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            p.opt(|p| p.double_starred_kvpairs())?;
            t!(p.op(Op::RBrace));
            Ok(Some(p.other(Kind::Dict)))
        });
        // Not guarded by the second pass: CPython skips an alternative in
        // the first pass only when it is a lone `invalid_*` rule, so this
        // one (and the `invalid_kvpair` inside) runs, and raises, in both.
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            t!(p.invalid_double_starred_kvpairs());
            t!(p.op(Op::RBrace));
            Ok(Some(p.other(Kind::Dict)))
        });
        Ok(None)
    }

    /// `double_starred_kvpairs: ','.double_starred_kvpair+ [',']`
    fn double_starred_kvpairs(&mut self) -> PR<()> {
        t!(self.gather(Op::Comma, |p| p.double_starred_kvpair()));
        self.opt(|p| p.op(Op::Comma))?;
        Ok(Some(()))
    }

    /// `double_starred_kvpair: '**' bitwise_or | kvpair`
    pub(super) fn double_starred_kvpair(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.op(Op::DoubleStar));
            Ok(p.bitwise_or()?.map(|_| ()))
        });
        alt!(self, |p| p.kvpair());
        Ok(None)
    }

    /// `kvpair: expression ':' expression`
    fn kvpair(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.expression());
            t!(p.op(Op::Colon));
            t!(p.expression());
            Ok(Some(()))
        })
    }

    /// `for_if_clauses: for_if_clause+`
    pub(super) fn for_if_clauses(&mut self) -> PR<()> {
        Ok(self.repeat1(|p| p.for_if_clause())?.map(|_| ()))
    }

    /// `for_if_clause`
    fn for_if_clause(&mut self) -> PR<()> {
        for with_async in [true, false] {
            let mut cut = false;
            alt!(self, |p| {
                if with_async {
                    t!(p.kw(Kw::Async));
                }
                t!(p.kw(Kw::For));
                t!(p.star_targets());
                t!(p.kw(Kw::In));
                cut = true;
                t!(p.disjunction());
                p.repeat(|p| {
                    t!(p.kw(Kw::If));
                    p.disjunction()
                })?;
                Ok(Some(()))
            });
            if cut {
                return Ok(None);
            }
        }
        if self.invalid {
            alt!(self, |p| p.invalid_for_target());
        }
        Ok(None)
    }

    /// `listcomp: '[' named_expression for_if_clauses ']' | invalid_comprehension`
    fn listcomp(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.op(Op::LSqb));
            t!(p.named_expression());
            t!(p.for_if_clauses());
            t!(p.op(Op::RSqb));
            Ok(Some(p.other(Kind::ListComp)))
        });
        if self.invalid {
            alt!(self, |p| p.invalid_comprehension());
        }
        Ok(None)
    }

    /// `setcomp: '{' named_expression for_if_clauses '}' | invalid_comprehension`
    fn setcomp(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            t!(p.named_expression());
            t!(p.for_if_clauses());
            t!(p.op(Op::RBrace));
            Ok(Some(p.other(Kind::SetComp)))
        });
        if self.invalid {
            alt!(self, |p| p.invalid_comprehension());
        }
        Ok(None)
    }

    /// `genexp: '(' (assignment_expression | expression !':=') for_if_clauses ')' | invalid_comprehension`
    pub(super) fn genexp(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            t!(p.assignment_or_plain_expression());
            t!(p.for_if_clauses());
            t!(p.op(Op::RPar));
            Ok(Some(p.other(Kind::GeneratorExp)))
        });
        if self.invalid {
            alt!(self, |p| p.invalid_comprehension());
        }
        Ok(None)
    }

    /// `(assignment_expression | expression !':=')`
    pub(super) fn assignment_or_plain_expression(&mut self) -> PR<u32> {
        alt!(self, |p| p.assignment_expression());
        alt!(self, |p| {
            let value = t!(p.expression());
            Ok((!p.at_op(Op::ColonEqual)?).then_some(value))
        });
        Ok(None)
    }

    /// `dictcomp: '{' kvpair for_if_clauses '}' | invalid_dict_comprehension`
    fn dictcomp(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.op(Op::LBrace));
            t!(p.kvpair());
            t!(p.for_if_clauses());
            t!(p.op(Op::RBrace));
            Ok(Some(p.other(Kind::DictComp)))
        });
        if self.invalid {
            alt!(self, |p| {
                t!(p.op(Op::LBrace));
                t!(p.op(Op::DoubleStar));
                t!(p.bitwise_or());
                t!(p.for_if_clauses());
                t!(p.op(Op::RBrace));
                Err(p.raise_syntax("dict unpacking cannot be used in dict comprehension"))
            });
        }
        Ok(None)
    }

    /// `arguments (memo): args [','] &')' | invalid_arguments`
    pub(super) fn arguments(&mut self) -> PR<u32> {
        self.memo(Rule::Arguments, |p| {
            alt!(p, |p| {
                let args = t!(p.args());
                p.opt(|p| p.op(Op::Comma))?;
                Ok(p.at_op(Op::RPar)?.then_some(args))
            });
            if p.invalid {
                alt!(p, |p| p.invalid_arguments());
            }
            Ok(None)
        })
    }

    /// `','.(starred_expression | (assignment_expression | expression !':=') !'=')+`
    pub(super) fn positional_arguments(&mut self) -> PR<Vec<u32>> {
        self.gather(Op::Comma, |p| {
            alt!(p, |p| p.starred_expression());
            alt!(p, |p| {
                let value = t!(p.assignment_or_plain_expression());
                Ok((!p.at_op(Op::Equal)?).then_some(value))
            });
            Ok(None)
        })
    }

    /// `args`: a call node counting positional arguments.
    pub(super) fn args(&mut self) -> PR<u32> {
        alt!(self, |p| {
            let positional = t!(p.positional_arguments());
            let keywords = p
                .opt(|p| {
                    t!(p.op(Op::Comma));
                    p.kwargs()
                })?
                .unwrap_or_default();
            Ok(Some(p.args_node(positional.len(), &keywords)))
        });
        alt!(self, |p| {
            let keywords = t!(p.kwargs());
            Ok(Some(p.args_node(0, &keywords)))
        });
        Ok(None)
    }

    fn args_node(&mut self, positional: usize, keywords: &[KwItem]) -> u32 {
        let starred = keywords
            .iter()
            .filter(|&&item| item == KwItem::Starred)
            .count();
        self.node(Node::Call {
            nargs: (positional + starred) as u32,
            kw_unpack: keywords.contains(&KwItem::DoubleStarred),
        })
    }

    /// `kwargs`
    pub(super) fn kwargs(&mut self) -> PR<Vec<KwItem>> {
        alt!(self, |p| {
            let mut items = t!(p.gather(Op::Comma, |p| p.kwarg_or_starred()));
            t!(p.op(Op::Comma));
            items.extend(t!(p.gather(Op::Comma, |p| p.kwarg_or_double_starred())));
            Ok(Some(items))
        });
        alt!(self, |p| p.gather(Op::Comma, |p| p.kwarg_or_starred()));
        alt!(self, |p| p
            .gather(Op::Comma, |p| p.kwarg_or_double_starred()));
        Ok(None)
    }

    /// `starred_expression: '*' expression`
    pub(super) fn starred_expression(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.op(Op::Star));
            let value = t!(p.expression());
            Ok(Some(p.node(Node::Starred(value))))
        })
    }

    /// `NAME '=' expression`
    fn keyword_argument(&mut self) -> PR<KwItem> {
        self.alt(|p| {
            t!(p.expect(Tk::Name));
            t!(p.op(Op::Equal));
            t!(p.expression());
            Ok(Some(KwItem::Keyword))
        })
    }

    /// `kwarg_or_starred: invalid_kwarg | NAME '=' expression | starred_expression`
    fn kwarg_or_starred(&mut self) -> PR<KwItem> {
        if self.invalid {
            alt!(self, |p| p.invalid_kwarg());
        }
        alt!(self, |p| p.keyword_argument());
        alt!(self, |p| Ok(p
            .starred_expression()?
            .map(|_| KwItem::Starred)));
        Ok(None)
    }

    /// `kwarg_or_double_starred: invalid_kwarg | NAME '=' expression | '**' expression`
    fn kwarg_or_double_starred(&mut self) -> PR<KwItem> {
        if self.invalid {
            alt!(self, |p| p.invalid_kwarg());
        }
        alt!(self, |p| p.keyword_argument());
        alt!(self, |p| {
            t!(p.op(Op::DoubleStar));
            t!(p.expression());
            Ok(Some(KwItem::DoubleStarred))
        });
        Ok(None)
    }
}
