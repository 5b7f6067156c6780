//! The `invalid_*` rules of CPython 3.11's grammar: they run in the second
//! pass only and raise the specialized messages.

use python_compat::ErrorClass;

use super::expressions::KwItem;
use super::{alt, t, Kw, Node, Op, Parser, Rule, Tk, PR};
use crate::unicode;

/// `TARGETS_TYPE`: what an invalid target was meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Targets {
    Star,
    Del,
    For,
}

impl Parser<'_> {
    /// `_PyPegen_get_invalid_target`.
    fn invalid_target(&self, node: u32, targets: Targets) -> Option<u32> {
        match self.nodes[node as usize] {
            Node::List(start, len) | Node::Tuple(start, len) => (start..start + len)
                .find_map(|index| self.invalid_target(self.seqs[index as usize], targets)),
            Node::Starred(value) => match targets {
                Targets::Del => Some(node),
                _ => self.invalid_target(value, targets),
            },
            Node::Compare { left, first_in } => match targets {
                Targets::For if first_in => self.invalid_target(left, targets),
                Targets::For => None,
                _ => Some(node),
            },
            Node::Name(_) => None,
            Node::Other(super::Kind::Subscript | super::Kind::Attribute) => None,
            _ => Some(node),
        }
    }

    /// `RAISE_SYNTAX_ERROR_INVALID_TARGET`.
    pub(super) fn invalid_target_error<T>(&mut self, targets: Targets, node: u32) -> PR<T> {
        match self.invalid_target(node, targets) {
            Some(invalid) => {
                let verb = match targets {
                    Targets::Del => "delete",
                    _ => "assign to",
                };
                let message = format!("cannot {verb} {}", self.expr_name(invalid));
                Err(self.raise_syntax(message))
            }
            None => Err(self.raise_syntax("invalid syntax")),
        }
    }

    /// `_PyPegen_check_legacy_stmt`: the name `print` or `exec`.
    fn legacy_name(&self, node: u32) -> Option<String> {
        let token = self.name_token(node)?;
        let text = std::str::from_utf8(self.text(token)).ok()?;
        let name = unicode::ascii_nfkc(text)?;
        matches!(name.as_str(), "print" | "exec").then_some(name)
    }

    /// `invalid_arguments`
    pub(super) fn invalid_arguments(&mut self) -> PR<u32> {
        const GENEXP: &str = "Generator expression must be parenthesized";
        // ((','.(starred_expression | (assignment_expression | expression !':=') !'=')+
        //   ',' kwargs) | kwargs) ',' '*'   (CPython 3.11.7, gh-110696)
        alt!(self, |p| {
            let keywords = p.alt(|p| {
                t!(p.positional_arguments());
                t!(p.op(Op::Comma));
                p.kwargs()
            })?;
            if keywords.is_none() {
                t!(p.kwargs());
            }
            t!(p.op(Op::Comma));
            t!(p.op(Op::Star));
            Err(p.raise_syntax("iterable argument unpacking follows keyword argument unpacking"))
        });
        alt!(self, |p| {
            t!(p.expression());
            t!(p.for_if_clauses());
            t!(p.op(Op::Comma));
            p.opt(|p| {
                alt!(p, |p| Ok(p.args()?.map(|_| ())));
                alt!(p, |p| {
                    t!(p.expression());
                    p.for_if_clauses()
                });
                Ok(None)
            })?;
            Err(p.raise_syntax(GENEXP))
        });
        alt!(self, |p| {
            t!(p.expect(Tk::Name));
            t!(p.op(Op::Equal));
            t!(p.expression());
            t!(p.for_if_clauses());
            Err(p.raise_syntax("invalid syntax. Maybe you meant '==' or ':=' instead of '='?"))
        });
        let mark = self.pos;
        if let Some(args) = self.args()? {
            if self.for_if_clauses()?.is_some() {
                // _PyPegen_nonparen_genexp_in_call: NULL ends the rule.
                let Node::Call { nargs, .. } = self.nodes[args as usize] else {
                    return Ok(None);
                };
                if nargs <= 1 {
                    self.pos = mark;
                    return Ok(None);
                }
                return Err(self.raise_syntax(GENEXP));
            }
        }
        self.pos = mark;
        alt!(self, |p| {
            t!(p.args());
            t!(p.op(Op::Comma));
            t!(p.expression());
            t!(p.for_if_clauses());
            Err(p.raise_syntax(GENEXP))
        });
        alt!(self, |p| {
            let args = t!(p.args());
            t!(p.op(Op::Comma));
            t!(p.args());
            let unpacking = matches!(
                p.nodes[args as usize],
                Node::Call {
                    kw_unpack: true,
                    ..
                }
            );
            Err(p.raise_syntax(if unpacking {
                "positional argument follows keyword argument unpacking"
            } else {
                "positional argument follows keyword argument"
            }))
        });
        Ok(None)
    }

    /// `invalid_kwarg`
    pub(super) fn invalid_kwarg(&mut self) -> PR<KwItem> {
        alt!(self, |p| {
            let token = p.peek()?;
            let name = match token.kind {
                Tk::Kw(Kw::True) => "True",
                Tk::Kw(Kw::False) => "False",
                Tk::Kw(Kw::None) => "None",
                _ => return Ok(None),
            };
            p.pos += 1;
            t!(p.op(Op::Equal));
            Err(p.raise_syntax(format!("cannot assign to {name}")))
        });
        alt!(self, |p| {
            t!(p.expect(Tk::Name));
            t!(p.op(Op::Equal));
            t!(p.expression());
            t!(p.for_if_clauses());
            Err(p.raise_syntax("invalid syntax. Maybe you meant '==' or ':=' instead of '='?"))
        });
        alt!(self, |p| {
            let keyword = p.lookahead(|p| {
                t!(p.expect(Tk::Name));
                p.op(Op::Equal)
            })?;
            if keyword {
                return Ok(None);
            }
            t!(p.expression());
            t!(p.op(Op::Equal));
            Err(p.raise_syntax("expression cannot contain assignment, perhaps you meant \"==\"?"))
        });
        Ok(None)
    }

    /// `invalid_legacy_expression: NAME !'(' star_expressions`
    pub(super) fn invalid_legacy_expression(&mut self) -> PR<u32> {
        let name = t!(self.alt(|p| {
            let token = t!(p.expect(Tk::Name));
            let node = p.node(Node::Name(token));
            if p.at_op(Op::LPar)? {
                return Ok(None);
            }
            t!(p.star_expressions());
            Ok(Some(node))
        }));
        match self.legacy_name(name) {
            Some(legacy) => Err(self.raise_syntax(format!(
                "Missing parentheses in call to '{legacy}'. Did you mean {legacy}(...)?"
            ))),
            None => Ok(None),
        }
    }

    /// `invalid_expression`
    pub(super) fn invalid_expression(&mut self) -> PR<u32> {
        let mark = self.pos;
        let excluded = self.lookahead(|p| {
            alt!(p, |p| {
                t!(p.expect(Tk::Name));
                p.expect(Tk::String)
            });
            alt!(p, |p| p.any_soft_keyword());
            Ok(None)
        })?;
        if !excluded {
            if let Some(left) = self.disjunction()? {
                if self.expression_without_invalid()?.is_some() {
                    // A match ends the rule, error or not.
                    let level = self.tokens[self.pos - 1].level;
                    if self.legacy_name(left).is_some() || level == 0 {
                        self.pos = mark;
                        return Ok(None);
                    }
                    return Err(self.raise_syntax("invalid syntax. Perhaps you forgot a comma?"));
                }
            }
        }
        self.pos = mark;
        alt!(self, |p| {
            t!(p.disjunction());
            t!(p.kw(Kw::If));
            t!(p.disjunction());
            if matches!(p.peek()?.kind, Tk::Kw(Kw::Else) | Tk::Op(Op::Colon)) {
                return Ok(None);
            }
            Err(p.raise_syntax("expected 'else' after 'if' expression"))
        });
        Ok(None)
    }

    /// `invalid_named_expression (memo)`
    pub(super) fn invalid_named_expression(&mut self) -> PR<u32> {
        self.memo(Rule::InvalidNamedExpression, |p| {
            alt!(p, |p| {
                let target = t!(p.expression());
                t!(p.op(Op::ColonEqual));
                t!(p.expression());
                let message = format!(
                    "cannot use assignment expressions with {}",
                    p.expr_name(target)
                );
                Err(p.raise_syntax(message))
            });
            alt!(p, |p| {
                t!(p.expect(Tk::Name));
                t!(p.op(Op::Equal));
                t!(p.bitwise_or());
                if matches!(p.peek()?.kind, Tk::Op(Op::Equal | Op::ColonEqual)) {
                    return Ok(None);
                }
                Err(p.raise_syntax("invalid syntax. Maybe you meant '==' or ':=' instead of '='?"))
            });
            alt!(p, |p| {
                let excluded = p.lookahead(|p| {
                    alt!(p, |p| p.list_display());
                    alt!(p, |p| p.tuple_display());
                    alt!(p, |p| p.genexp());
                    alt!(p, |p| p.kw(Kw::True));
                    alt!(p, |p| p.kw(Kw::None));
                    alt!(p, |p| p.kw(Kw::False));
                    Ok(None)
                })?;
                if excluded {
                    return Ok(None);
                }
                let target = t!(p.bitwise_or());
                t!(p.op(Op::Equal));
                t!(p.bitwise_or());
                if matches!(p.peek()?.kind, Tk::Op(Op::Equal | Op::ColonEqual)) {
                    return Ok(None);
                }
                let message = format!(
                    "cannot assign to {} here. Maybe you meant '==' instead of '='?",
                    p.expr_name(target)
                );
                Err(p.raise_syntax(message))
            });
            Ok(None)
        })
    }

    /// `invalid_ann_assign_target: list | tuple | '(' invalid_ann_assign_target ')'`
    fn invalid_ann_assign_target(&mut self) -> PR<u32> {
        alt!(self, |p| p.list_display());
        alt!(self, |p| p.tuple_display());
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            let target = t!(p.invalid_ann_assign_target());
            t!(p.op(Op::RPar));
            Ok(Some(target))
        });
        Ok(None)
    }

    /// `invalid_assignment`
    pub(super) fn invalid_assignment(&mut self) -> PR<u32> {
        alt!(self, |p| {
            let target = t!(p.invalid_ann_assign_target());
            t!(p.op(Op::Colon));
            t!(p.expression());
            let message = format!(
                "only single target (not {}) can be annotated",
                p.expr_name(target)
            );
            Err(p.raise_syntax(message))
        });
        alt!(self, |p| {
            t!(p.star_named_expression());
            t!(p.op(Op::Comma));
            p.repeat(|p| p.star_named_expressions())?;
            t!(p.op(Op::Colon));
            t!(p.expression());
            Err(p.raise_syntax("only single target (not tuple) can be annotated"))
        });
        alt!(self, |p| {
            t!(p.expression());
            t!(p.op(Op::Colon));
            t!(p.expression());
            Err(p.raise_syntax("illegal target for annotation"))
        });
        alt!(self, |p| {
            p.repeat(|p| {
                t!(p.star_targets());
                p.op(Op::Equal)
            })?;
            let target = t!(p.star_expressions());
            t!(p.op(Op::Equal));
            p.invalid_target_error(Targets::Star, target)
        });
        alt!(self, |p| {
            p.repeat(|p| {
                t!(p.star_targets());
                p.op(Op::Equal)
            })?;
            t!(p.yield_expr());
            t!(p.op(Op::Equal));
            Err(p.raise_syntax("assignment to yield expression not possible"))
        });
        alt!(self, |p| {
            let target = t!(p.star_expressions());
            t!(p.augassign());
            t!(p.annotated_rhs());
            let message = format!(
                "'{}' is an illegal expression for augmented assignment",
                p.expr_name(target)
            );
            Err(p.raise_syntax(message))
        });
        Ok(None)
    }

    /// `invalid_del_stmt: 'del' star_expressions`
    pub(super) fn invalid_del_stmt(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.kw(Kw::Del));
            let target = t!(p.star_expressions());
            p.invalid_target_error(Targets::Del, target)
        })
    }

    /// `invalid_comprehension`
    pub(super) fn invalid_comprehension(&mut self) -> PR<u32> {
        alt!(self, |p| {
            if !matches!(p.peek()?.kind, Tk::Op(Op::LSqb | Op::LPar | Op::LBrace)) {
                return Ok(None);
            }
            p.pos += 1;
            t!(p.starred_expression());
            t!(p.for_if_clauses());
            Err(p.raise_syntax("iterable unpacking cannot be used in comprehension"))
        });
        alt!(self, |p| {
            if !matches!(p.peek()?.kind, Tk::Op(Op::LSqb | Op::LBrace)) {
                return Ok(None);
            }
            p.pos += 1;
            t!(p.star_named_expression());
            t!(p.op(Op::Comma));
            t!(p.star_named_expressions());
            t!(p.for_if_clauses());
            Err(p.raise_syntax("did you forget parentheses around the comprehension target?"))
        });
        alt!(self, |p| {
            if !matches!(p.peek()?.kind, Tk::Op(Op::LSqb | Op::LBrace)) {
                return Ok(None);
            }
            p.pos += 1;
            t!(p.star_named_expression());
            t!(p.op(Op::Comma));
            t!(p.for_if_clauses());
            Err(p.raise_syntax("did you forget parentheses around the comprehension target?"))
        });
        Ok(None)
    }

    /// `invalid_parameters` / `invalid_lambda_parameters`
    pub(super) fn invalid_parameters(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            p.repeat(|p| p.param_no_default(lambda))?;
            // invalid_parameters_helper: slash_with_default | param_with_default+
            let helper = p.alt(|p| p.slash_with_default(lambda))?;
            if helper.is_none() {
                t!(p.repeat1(|p| p.param_with_default(lambda)));
            }
            t!(p.param_no_default(lambda));
            Err(p.raise_syntax("non-default argument follows default argument"))
        });
        if lambda {
            alt!(self, |p| {
                p.repeat(|p| p.param_no_default(true))?;
                t!(p.op(Op::LPar));
                t!(p.gather(Op::Comma, |p| p.param(true)));
                p.opt(|p| p.op(Op::Comma))?;
                t!(p.op(Op::RPar));
                Err(p.raise_syntax("Lambda expression parameters cannot be parenthesized"))
            });
        } else {
            alt!(self, |p| {
                p.repeat(|p| p.param_no_default(false))?;
                t!(p.op(Op::LPar));
                t!(p.repeat1(|p| p.param_no_default(false)));
                p.opt(|p| p.op(Op::Comma))?;
                t!(p.op(Op::RPar));
                Err(p.raise_syntax("Function parameters cannot be parenthesized"))
            });
        }
        alt!(self, |p| {
            t!(p.op(Op::Slash));
            t!(p.op(Op::Comma));
            Err(p.raise_syntax("at least one argument must precede /"))
        });
        alt!(self, |p| {
            let slash = p.alt(|p| p.slash_no_default(lambda))?;
            if slash.is_none() {
                t!(p.slash_with_default(lambda));
            }
            p.repeat(|p| p.param_maybe_default(lambda))?;
            t!(p.op(Op::Slash));
            Err(p.raise_syntax("/ may appear only once"))
        });
        alt!(self, |p| {
            p.opt(|p| {
                alt!(p, |p| p.slash_no_default(lambda));
                alt!(p, |p| p.slash_with_default(lambda));
                Ok(None)
            })?;
            p.repeat(|p| p.param_maybe_default(lambda))?;
            t!(p.op(Op::Star));
            let after = p.alt(|p| Ok(p.op(Op::Comma)?.map(|_| ())))?;
            if after.is_none() {
                t!(p.param_no_default(lambda));
            }
            p.repeat(|p| p.param_maybe_default(lambda))?;
            t!(p.op(Op::Slash));
            Err(p.raise_syntax("/ must be ahead of *"))
        });
        alt!(self, |p| {
            t!(p.repeat1(|p| p.param_maybe_default(lambda)));
            t!(p.op(Op::Slash));
            t!(p.op(Op::Star));
            Err(p.raise_syntax("expected comma between / and *"))
        });
        Ok(None)
    }

    /// `invalid_star_etc` / `invalid_lambda_star_etc`
    pub(super) fn invalid_star_etc(&mut self, lambda: bool) -> PR<()> {
        let end = if lambda { Op::Colon } else { Op::RPar };
        alt!(self, |p| {
            t!(p.op(Op::Star));
            let bare = match p.peek()?.kind {
                Tk::Op(op) if op == end => true,
                Tk::Op(Op::Comma) => {
                    p.pos += 1;
                    matches!(p.peek()?.kind, Tk::Op(op) if op == end || op == Op::DoubleStar)
                }
                _ => false,
            };
            if !bare {
                return Ok(None);
            }
            Err(p.raise_syntax("named arguments must follow bare *"))
        });
        if !lambda {
            // '*' ',' TYPE_COMMENT: no type comments are tokenized.
            alt!(self, |p| {
                t!(p.op(Op::Star));
                t!(p.op(Op::Comma));
                p.peek()?;
                Ok(None)
            });
        }
        alt!(self, |p| {
            t!(p.op(Op::Star));
            t!(p.param(lambda));
            t!(p.op(Op::Equal));
            Err(p.raise_syntax("var-positional argument cannot have default value"))
        });
        alt!(self, |p| {
            t!(p.op(Op::Star));
            let first = p.alt(|p| p.param_no_default(lambda))?;
            if first.is_none() {
                t!(p.op(Op::Comma));
            }
            p.repeat(|p| p.param_maybe_default(lambda))?;
            t!(p.op(Op::Star));
            let second = p.alt(|p| p.param_no_default(lambda))?;
            if second.is_none() {
                t!(p.op(Op::Comma));
            }
            Err(p.raise_syntax("* argument may appear only once"))
        });
        Ok(None)
    }

    /// `invalid_kwds` / `invalid_lambda_kwds`
    pub(super) fn invalid_kwds(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            t!(p.op(Op::DoubleStar));
            t!(p.param(lambda));
            t!(p.op(Op::Equal));
            Err(p.raise_syntax("var-keyword argument cannot have default value"))
        });
        alt!(self, |p| {
            t!(p.op(Op::DoubleStar));
            t!(p.param(lambda));
            t!(p.op(Op::Comma));
            t!(p.param(lambda));
            Err(p.raise_syntax("arguments cannot follow var-keyword argument"))
        });
        alt!(self, |p| {
            t!(p.op(Op::DoubleStar));
            t!(p.param(lambda));
            t!(p.op(Op::Comma));
            if !matches!(
                p.peek()?.kind,
                Tk::Op(Op::Star | Op::DoubleStar | Op::Slash)
            ) {
                return Ok(None);
            }
            Err(p.raise_syntax("arguments cannot follow var-keyword argument"))
        });
        Ok(None)
    }

    /// `invalid_for_target: ASYNC? 'for' star_expressions`
    pub(super) fn invalid_for_target<T>(&mut self) -> PR<T> {
        self.alt(|p| {
            p.opt(|p| p.kw(Kw::Async))?;
            t!(p.kw(Kw::For));
            let target = t!(p.star_expressions());
            p.invalid_target_error(Targets::For, target)
        })
    }

    /// `','.(expression ['as' star_target])+` (or with `expressions`).
    fn with_items(&mut self, parenthesized: bool) -> PR<()> {
        Ok(self
            .gather(Op::Comma, |p| {
                if parenthesized {
                    t!(p.expressions());
                } else {
                    t!(p.expression());
                }
                p.opt(|p| {
                    t!(p.kw(Kw::As));
                    p.star_target()
                })?;
                Ok(Some(()))
            })?
            .map(|_| ()))
    }

    /// `invalid_with_stmt`
    pub(super) fn invalid_with_stmt(&mut self) -> PR<()> {
        alt!(self, |p| {
            p.opt(|p| p.kw(Kw::Async))?;
            t!(p.kw(Kw::With));
            t!(p.with_items(false));
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            p.opt(|p| p.kw(Kw::Async))?;
            t!(p.kw(Kw::With));
            t!(p.op(Op::LPar));
            t!(p.with_items(true));
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RPar));
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        Ok(None)
    }

    /// `invalid_with_stmt_indent`
    pub(super) fn invalid_with_stmt_indent(&mut self) -> PR<()> {
        alt!(self, |p| {
            p.opt(|p| p.kw(Kw::Async))?;
            let keyword = t!(p.kw(Kw::With));
            t!(p.with_items(false));
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'with' statement")
        });
        alt!(self, |p| {
            p.opt(|p| p.kw(Kw::Async))?;
            let keyword = t!(p.kw(Kw::With));
            t!(p.op(Op::LPar));
            t!(p.with_items(true));
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RPar));
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'with' statement")
        });
        Ok(None)
    }

    /// `invalid_try_stmt`
    pub(super) fn invalid_try_stmt(&mut self) -> PR<()> {
        const BOTH: &str = "cannot have both 'except' and 'except*' on the same 'try'";
        alt!(self, |p| {
            let keyword = t!(p.kw(Kw::Try));
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'try' statement")
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Try));
            t!(p.op(Op::Colon));
            t!(p.block());
            if matches!(p.peek()?.kind, Tk::Kw(Kw::Except | Kw::Finally)) {
                return Ok(None);
            }
            Err(p.raise_syntax("expected 'except' or 'finally' block"))
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Try));
            t!(p.op(Op::Colon));
            p.repeat(|p| p.block())?;
            t!(p.repeat1(|p| p.except_block()));
            t!(p.kw(Kw::Except));
            t!(p.op(Op::Star));
            t!(p.expression());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            t!(p.op(Op::Colon));
            Err(p.raise_syntax(BOTH))
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Try));
            t!(p.op(Op::Colon));
            p.repeat(|p| p.block())?;
            t!(p.repeat1(|p| p.except_star_block()));
            t!(p.kw(Kw::Except));
            p.opt(|p| {
                t!(p.expression());
                p.opt(|p| {
                    t!(p.kw(Kw::As));
                    p.expect(Tk::Name)
                })?;
                Ok(Some(()))
            })?;
            t!(p.op(Op::Colon));
            Err(p.raise_syntax(BOTH))
        });
        Ok(None)
    }

    /// `invalid_except_stmt`
    pub(super) fn invalid_except_stmt(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.kw(Kw::Except));
            p.opt(|p| p.op(Op::Star))?;
            t!(p.expression());
            t!(p.op(Op::Comma));
            t!(p.expressions());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            t!(p.op(Op::Colon));
            Err(p.raise_syntax("multiple exception types must be parenthesized"))
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Except));
            p.opt(|p| p.op(Op::Star))?;
            t!(p.expression());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Except));
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Except));
            t!(p.op(Op::Star));
            if !matches!(p.peek()?.kind, Tk::Newline | Tk::Op(Op::Colon)) {
                return Ok(None);
            }
            Err(p.raise_syntax("expected one or more exception types"))
        });
        Ok(None)
    }

    /// `invalid_except_stmt_indent`
    pub(super) fn invalid_except_stmt_indent(&mut self) -> PR<()> {
        alt!(self, |p| {
            let keyword = t!(p.kw(Kw::Except));
            t!(p.expression());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'except' statement")
        });
        alt!(self, |p| {
            let keyword = t!(p.kw(Kw::Except));
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'except' statement")
        });
        Ok(None)
    }

    /// `invalid_except_star_stmt_indent`
    pub(super) fn invalid_except_star_stmt_indent(&mut self) -> PR<()> {
        self.alt(|p| {
            let keyword = t!(p.kw(Kw::Except));
            t!(p.op(Op::Star));
            t!(p.expression());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'except*' statement")
        })
    }

    /// `invalid_match_stmt`
    pub(super) fn invalid_match_stmt(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.soft(b"match"));
            t!(p.subject_expr());
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            let keyword = t!(p.soft(b"match"));
            t!(p.subject_expr());
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'match' statement")
        });
        Ok(None)
    }

    /// `invalid_case_block`
    pub(super) fn invalid_case_block(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.soft(b"case"));
            t!(p.patterns());
            p.opt(|p| p.guard())?;
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            let keyword = t!(p.soft(b"case"));
            t!(p.patterns());
            p.opt(|p| p.guard())?;
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'case' statement")
        });
        Ok(None)
    }

    /// `invalid_if_stmt`, `invalid_elif_stmt`, `invalid_while_stmt`.
    pub(super) fn invalid_if_stmt(&mut self, keyword: Kw, word: &str) -> PR<()> {
        alt!(self, |p| {
            t!(p.kw(keyword));
            t!(p.named_expression());
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            let mut anchor = t!(p.kw(keyword));
            if keyword == Kw::If {
                // `a='if' a=named_expression`: the line is the condition's.
                anchor = p.pos as u32;
            }
            t!(p.named_expression());
            t!(p.op(Op::Colon));
            p.missing_block(anchor, &format!("'{word}' statement"))
        });
        Ok(None)
    }

    /// `invalid_for_stmt`
    pub(super) fn invalid_for_stmt(&mut self) -> PR<()> {
        alt!(self, |p| {
            p.opt(|p| p.kw(Kw::Async))?;
            t!(p.kw(Kw::For));
            t!(p.star_targets());
            t!(p.kw(Kw::In));
            t!(p.star_expressions());
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            p.opt(|p| p.kw(Kw::Async))?;
            let keyword = t!(p.kw(Kw::For));
            t!(p.star_targets());
            t!(p.kw(Kw::In));
            t!(p.star_expressions());
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "'for' statement")
        });
        Ok(None)
    }

    /// `invalid_def_raw`
    pub(super) fn invalid_def_raw(&mut self) -> PR<()> {
        self.alt(|p| {
            p.opt(|p| p.kw(Kw::Async))?;
            let keyword = t!(p.kw(Kw::Def));
            t!(p.expect(Tk::Name));
            t!(p.op(Op::LPar));
            p.opt(|p| p.params_of(false))?;
            t!(p.op(Op::RPar));
            p.opt(|p| {
                t!(p.op(Op::RArrow));
                p.expression()
            })?;
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "function definition")
        })
    }

    /// `invalid_class_def_raw`
    pub(super) fn invalid_class_def_raw(&mut self) -> PR<()> {
        let header = |p: &mut Self| -> PR<u32> {
            let keyword = t!(p.kw(Kw::Class));
            t!(p.expect(Tk::Name));
            p.opt(|p| {
                t!(p.op(Op::LPar));
                p.opt(|p| p.arguments())?;
                p.op(Op::RPar)
            })?;
            Ok(Some(keyword))
        };
        alt!(self, |p| {
            t!(header(p));
            t!(p.expect(Tk::Newline));
            Err(p.raise_syntax("expected ':'"))
        });
        alt!(self, |p| {
            let keyword = t!(header(p));
            t!(p.op(Op::Colon));
            p.missing_block(keyword, "class definition")
        });
        Ok(None)
    }

    /// `invalid_double_starred_kvpairs`
    pub(super) fn invalid_double_starred_kvpairs(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.gather(Op::Comma, |p| p.double_starred_kvpair()));
            t!(p.op(Op::Comma));
            p.invalid_kvpair()
        });
        self.invalid_dict_value()
    }

    /// `invalid_kvpair`
    fn invalid_kvpair(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.expression());
            if p.at_op(Op::Colon)? {
                return Ok(None);
            }
            Err(p.raise(
                ErrorClass::Syntax,
                "':' expected after dictionary key".into(),
            ))
        });
        self.invalid_dict_value()
    }

    /// The last two alternatives of both `invalid_double_starred_kvpairs`
    /// and `invalid_kvpair` (the grammar spells them out in each): a key
    /// and `:` followed by a starred value, or by no value at all.
    fn invalid_dict_value(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.expression());
            t!(p.op(Op::Colon));
            t!(p.op(Op::Star));
            t!(p.bitwise_or());
            Err(p.raise_syntax("cannot use a starred expression in a dictionary value"))
        });
        alt!(self, |p| {
            t!(p.expression());
            t!(p.op(Op::Colon));
            if !matches!(p.peek()?.kind, Tk::Op(Op::RBrace | Op::Comma)) {
                return Ok(None);
            }
            Err(p.raise_syntax("expression expected after dictionary key and ':'"))
        });
        Ok(None)
    }
}
