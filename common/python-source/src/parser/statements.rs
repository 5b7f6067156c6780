//! Statements: CPython 3.11's `file` down to the compound statements and
//! function parameters.

use super::{alt, t, Kw, Op, Parser, Rule, Stmt, Tk, PR};

impl Parser<'_> {
    /// `file: [statements] ENDMARKER`
    pub(super) fn file(&mut self) -> PR<Vec<u32>> {
        self.alt(|p| {
            let statements = p.opt(|p| p.statements())?.unwrap_or_default();
            t!(p.expect(Tk::EndMarker));
            Ok(Some(statements))
        })
    }

    /// `statements: statement+`
    pub(super) fn statements(&mut self) -> PR<Vec<u32>> {
        let groups = t!(self.repeat1(|p| p.statement()));
        Ok(Some(groups.into_iter().flatten().collect()))
    }

    /// `statement: compound_stmt | simple_stmts`
    fn statement(&mut self) -> PR<Vec<u32>> {
        self.nested(|p| {
            if p.alt(|p| p.compound_stmt())?.is_some() {
                let stmt = p.stmt(Stmt::Other);
                return Ok(Some(vec![stmt]));
            }
            p.alt(|p| p.simple_stmts())
        })
    }

    /// `simple_stmts: simple_stmt !';' NEWLINE | ';'.simple_stmt+ [';'] NEWLINE`
    pub(super) fn simple_stmts(&mut self) -> PR<Vec<u32>> {
        alt!(self, |p| {
            let stmt = t!(p.simple_stmt());
            if p.at_op(Op::Semi)? {
                return Ok(None);
            }
            t!(p.expect(Tk::Newline));
            Ok(Some(vec![stmt]))
        });
        alt!(self, |p| {
            let stmts = t!(p.gather(Op::Semi, |p| p.simple_stmt()));
            p.opt(|p| p.op(Op::Semi))?;
            t!(p.expect(Tk::Newline));
            Ok(Some(stmts))
        });
        Ok(None)
    }

    /// `simple_stmt (memo)`
    fn simple_stmt(&mut self) -> PR<u32> {
        self.memo(Rule::SimpleStmt, |p| {
            alt!(p, |p| p.assignment());
            alt!(p, |p| {
                t!(p.star_expressions());
                Ok(Some(p.stmt(Stmt::Other)))
            });
            match p.peek()?.kind {
                Tk::Kw(Kw::Return) => alt!(p, |p| {
                    t!(p.return_stmt());
                    Ok(Some(p.stmt(Stmt::Other)))
                }),
                Tk::Kw(Kw::Import | Kw::From) => alt!(p, |p| {
                    t!(p.import_stmt());
                    Ok(Some(p.stmt(Stmt::Other)))
                }),
                Tk::Kw(Kw::Raise) => alt!(p, |p| {
                    t!(p.raise_stmt());
                    Ok(Some(p.stmt(Stmt::Other)))
                }),
                _ => {}
            }
            alt!(p, |p| {
                t!(p.kw(Kw::Pass));
                Ok(Some(p.stmt(Stmt::Other)))
            });
            match p.peek()?.kind {
                Tk::Kw(Kw::Del) => alt!(p, |p| {
                    t!(p.del_stmt());
                    Ok(Some(p.stmt(Stmt::Other)))
                }),
                Tk::Kw(Kw::Yield) => alt!(p, |p| {
                    t!(p.yield_expr());
                    Ok(Some(p.stmt(Stmt::Other)))
                }),
                Tk::Kw(Kw::Assert) => alt!(p, |p| {
                    t!(p.assert_stmt());
                    Ok(Some(p.stmt(Stmt::Other)))
                }),
                _ => {}
            }
            alt!(p, |p| {
                t!(p.kw(Kw::Break));
                Ok(Some(p.stmt(Stmt::Other)))
            });
            alt!(p, |p| {
                t!(p.kw(Kw::Continue));
                Ok(Some(p.stmt(Stmt::Other)))
            });
            if let Tk::Kw(kw @ (Kw::Global | Kw::Nonlocal)) = p.peek()?.kind {
                alt!(p, |p| {
                    t!(p.kw(kw));
                    t!(p.gather(Op::Comma, |p| p.expect(Tk::Name)));
                    Ok(Some(p.stmt(Stmt::Other)))
                });
            }
            Ok(None)
        })
    }

    /// `compound_stmt`
    fn compound_stmt(&mut self) -> PR<()> {
        let kind = self.peek()?.kind;
        if matches!(kind, Tk::Kw(Kw::Def | Kw::Async) | Tk::Op(Op::At)) {
            alt!(self, |p| p.function_def());
        }
        if kind == Tk::Kw(Kw::If) {
            alt!(self, |p| p.if_stmt());
        }
        if matches!(kind, Tk::Kw(Kw::Class) | Tk::Op(Op::At)) {
            alt!(self, |p| p.class_def());
        }
        if matches!(kind, Tk::Kw(Kw::With | Kw::Async)) {
            alt!(self, |p| p.with_stmt());
        }
        if matches!(kind, Tk::Kw(Kw::For | Kw::Async)) {
            alt!(self, |p| p.for_stmt());
        }
        if kind == Tk::Kw(Kw::Try) {
            alt!(self, |p| p.try_stmt());
        }
        if kind == Tk::Kw(Kw::While) {
            alt!(self, |p| p.while_stmt());
        }
        alt!(self, |p| p.match_stmt());
        Ok(None)
    }

    /// `assignment`
    fn assignment(&mut self) -> PR<u32> {
        // NAME ':' expression ['=' annotated_rhs]
        alt!(self, |p| {
            t!(p.expect(Tk::Name));
            t!(p.op(Op::Colon));
            t!(p.expression());
            p.opt(|p| {
                t!(p.op(Op::Equal));
                p.annotated_rhs()
            })?;
            Ok(Some(p.stmt(Stmt::Other)))
        });
        // ('(' single_target ')' | single_subscript_attribute_target) ':' expression ['=' annotated_rhs]
        alt!(self, |p| {
            let target = p.alt(|p| {
                t!(p.op(Op::LPar));
                let target = t!(p.single_target());
                t!(p.op(Op::RPar));
                Ok(Some(target))
            })?;
            if target.is_none() {
                t!(p.single_subscript_attribute_target());
            }
            t!(p.op(Op::Colon));
            t!(p.expression());
            p.opt(|p| {
                t!(p.op(Op::Equal));
                p.annotated_rhs()
            })?;
            Ok(Some(p.stmt(Stmt::Other)))
        });
        // (star_targets '=')+ (yield_expr | star_expressions) !'=' [TYPE_COMMENT]
        alt!(self, |p| {
            let targets = t!(p.repeat1(|p| {
                let target = t!(p.star_targets());
                t!(p.op(Op::Equal));
                Ok(Some(target))
            }));
            let value = t!(p.annotated_rhs());
            if p.at_op(Op::Equal)? {
                return Ok(None);
            }
            p.peek()?;
            let targets = p.seq(&targets);
            Ok(Some(p.stmt(Stmt::Assign { targets, value })))
        });
        // single_target augassign ~ (yield_expr | star_expressions)
        let mut cut = false;
        alt!(self, |p| {
            t!(p.single_target());
            t!(p.augassign());
            cut = true;
            t!(p.annotated_rhs());
            Ok(Some(p.stmt(Stmt::Other)))
        });
        if cut {
            return Ok(None);
        }
        if self.invalid {
            alt!(self, |p| p.invalid_assignment());
        }
        Ok(None)
    }

    /// `annotated_rhs: yield_expr | star_expressions`
    pub(super) fn annotated_rhs(&mut self) -> PR<u32> {
        alt!(self, |p| p.yield_expr());
        alt!(self, |p| p.star_expressions());
        Ok(None)
    }

    /// `augassign`
    pub(super) fn augassign(&mut self) -> PR<u32> {
        let token = self.peek()?;
        if let Tk::Op(op) = token.kind {
            if op.is_augassign() {
                self.pos += 1;
                return Ok(Some(self.pos as u32 - 1));
            }
        }
        Ok(None)
    }

    /// `return_stmt: 'return' [star_expressions]`
    fn return_stmt(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.kw(Kw::Return));
            p.opt(|p| p.star_expressions())?;
            Ok(Some(()))
        })
    }

    /// `raise_stmt: 'raise' expression ['from' expression] | 'raise'`
    fn raise_stmt(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.kw(Kw::Raise));
            t!(p.expression());
            p.opt(|p| {
                t!(p.kw(Kw::From));
                p.expression()
            })?;
            Ok(Some(()))
        });
        alt!(self, |p| Ok(p.kw(Kw::Raise)?.map(|_| ())));
        Ok(None)
    }

    /// `del_stmt: 'del' del_targets &(';' | NEWLINE) | invalid_del_stmt`
    fn del_stmt(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.kw(Kw::Del));
            t!(p.del_targets());
            let next = p.peek()?.kind;
            Ok(matches!(next, Tk::Op(Op::Semi) | Tk::Newline).then_some(()))
        });
        if self.invalid {
            alt!(self, |p| p.invalid_del_stmt());
        }
        Ok(None)
    }

    /// `assert_stmt: 'assert' expression [',' expression]`
    fn assert_stmt(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.kw(Kw::Assert));
            t!(p.expression());
            p.opt(|p| {
                t!(p.op(Op::Comma));
                p.expression()
            })?;
            Ok(Some(()))
        })
    }

    /// `import_stmt: import_name | import_from`
    fn import_stmt(&mut self) -> PR<()> {
        // import_name: 'import' dotted_as_names
        alt!(self, |p| {
            t!(p.kw(Kw::Import));
            t!(p.dotted_as_names());
            Ok(Some(()))
        });
        // 'from' ('.' | '...')* dotted_name 'import' import_from_targets
        alt!(self, |p| {
            t!(p.kw(Kw::From));
            p.repeat(|p| p.dots())?;
            t!(p.dotted_name());
            t!(p.kw(Kw::Import));
            t!(p.import_from_targets());
            Ok(Some(()))
        });
        // 'from' ('.' | '...')+ 'import' import_from_targets
        alt!(self, |p| {
            t!(p.kw(Kw::From));
            t!(p.repeat1(|p| p.dots()));
            t!(p.kw(Kw::Import));
            t!(p.import_from_targets());
            Ok(Some(()))
        });
        Ok(None)
    }

    fn dots(&mut self) -> PR<u32> {
        alt!(self, |p| p.op(Op::Dot));
        alt!(self, |p| p.op(Op::Ellipsis));
        Ok(None)
    }

    /// `import_from_targets`
    fn import_from_targets(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            t!(p.import_from_as_names());
            p.opt(|p| p.op(Op::Comma))?;
            t!(p.op(Op::RPar));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.import_from_as_names());
            Ok((!p.at_op(Op::Comma)?).then_some(()))
        });
        alt!(self, |p| Ok(p.op(Op::Star)?.map(|_| ())));
        if self.invalid {
            // import_from_as_names ',' NEWLINE
            alt!(self, |p| {
                t!(p.import_from_as_names());
                t!(p.op(Op::Comma));
                t!(p.expect(Tk::Newline));
                Err(p.raise_syntax("trailing comma not allowed without surrounding parentheses"))
            });
        }
        Ok(None)
    }

    /// `import_from_as_names: ','.(NAME ['as' NAME])+`
    pub(super) fn import_from_as_names(&mut self) -> PR<()> {
        let names = self.gather(Op::Comma, |p| {
            t!(p.expect(Tk::Name));
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            Ok(Some(()))
        })?;
        Ok(names.map(|_| ()))
    }

    /// `dotted_as_names: ','.(dotted_name ['as' NAME])+`
    fn dotted_as_names(&mut self) -> PR<()> {
        let names = self.gather(Op::Comma, |p| {
            t!(p.dotted_name());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            Ok(Some(()))
        })?;
        Ok(names.map(|_| ()))
    }

    /// `dotted_name: dotted_name '.' NAME | NAME`
    fn dotted_name(&mut self) -> PR<u32> {
        self.memo(Rule::DottedName, |p| {
            let first = t!(p.expect(Tk::Name));
            loop {
                let step = p.alt(|p| {
                    t!(p.op(Op::Dot));
                    p.expect(Tk::Name)
                })?;
                if step.is_none() {
                    break;
                }
            }
            Ok(Some(first))
        })
    }

    /// `block (memo): NEWLINE INDENT statements DEDENT | simple_stmts | invalid_block`
    pub(super) fn block(&mut self) -> PR<u32> {
        self.memo(Rule::Block, |p| {
            alt!(p, |p| {
                t!(p.expect(Tk::Newline));
                t!(p.expect(Tk::Indent));
                t!(p.statements());
                t!(p.expect(Tk::Dedent));
                Ok(Some(0))
            });
            alt!(p, |p| Ok(p.simple_stmts()?.map(|_| 0)));
            if p.invalid {
                alt!(p, |p| {
                    t!(p.expect(Tk::Newline));
                    if p.at(Tk::Indent)? {
                        return Ok(None);
                    }
                    Err(p.raise(
                        python_compat::ErrorClass::Indentation,
                        "expected an indented block".into(),
                    ))
                });
            }
            Ok(None)
        })
    }

    /// `decorators: ('@' named_expression NEWLINE)+`
    fn decorators(&mut self) -> PR<()> {
        let found = self.repeat1(|p| {
            t!(p.op(Op::At));
            t!(p.named_expression());
            t!(p.expect(Tk::Newline));
            Ok(Some(()))
        })?;
        Ok(found.map(|_| ()))
    }

    /// `class_def: decorators class_def_raw | class_def_raw`
    fn class_def(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.decorators());
            p.class_def_raw()
        });
        alt!(self, |p| p.class_def_raw());
        Ok(None)
    }

    /// `class_def_raw`
    fn class_def_raw(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_class_def_raw());
        }
        alt!(self, |p| {
            t!(p.kw(Kw::Class));
            t!(p.expect(Tk::Name));
            p.opt(|p| {
                t!(p.op(Op::LPar));
                p.opt(|p| p.arguments())?;
                p.op(Op::RPar)
            })?;
            t!(p.op(Op::Colon));
            t!(p.block());
            Ok(Some(()))
        });
        Ok(None)
    }

    /// `function_def: decorators function_def_raw | function_def_raw`
    fn function_def(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.decorators());
            p.function_def_raw()
        });
        alt!(self, |p| p.function_def_raw());
        Ok(None)
    }

    /// `function_def_raw`
    fn function_def_raw(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_def_raw());
        }
        for with_async in [false, true] {
            alt!(self, |p| {
                if with_async {
                    t!(p.kw(Kw::Async));
                }
                t!(p.kw(Kw::Def));
                t!(p.expect(Tk::Name));
                t!(p.forced(Op::LPar, "("));
                p.opt(|p| p.params_of(false))?;
                t!(p.op(Op::RPar));
                p.opt(|p| {
                    t!(p.op(Op::RArrow));
                    p.expression()
                })?;
                t!(p.forced(Op::Colon, ":"));
                p.opt(|p| p.func_type_comment())?;
                t!(p.block());
                Ok(Some(()))
            });
        }
        Ok(None)
    }

    /// `func_type_comment`: never matches (no type comments are
    /// tokenized), but reads the token after a NEWLINE as CPython does.
    fn func_type_comment(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.expect(Tk::Newline));
            p.peek()?;
            Ok(None::<()>)
        })?;
        self.peek()?;
        Ok(None)
    }

    /// `params: invalid_parameters | parameters` (`lambda`: the
    /// `lambda_params` twin, whose parameters have no annotations and end
    /// at `:` instead of `)`).
    pub(super) fn params_of(&mut self, lambda: bool) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_parameters(lambda));
        }
        alt!(self, |p| p.parameters(lambda));
        Ok(None)
    }

    /// `parameters` / `lambda_parameters`
    fn parameters(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            t!(p.slash_no_default(lambda));
            p.repeat(|p| p.param_no_default(lambda))?;
            p.repeat(|p| p.param_with_default(lambda))?;
            p.opt(|p| p.star_etc(lambda))?;
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.slash_with_default(lambda));
            p.repeat(|p| p.param_with_default(lambda))?;
            p.opt(|p| p.star_etc(lambda))?;
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.repeat1(|p| p.param_no_default(lambda)));
            p.repeat(|p| p.param_with_default(lambda))?;
            p.opt(|p| p.star_etc(lambda))?;
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.repeat1(|p| p.param_with_default(lambda)));
            p.opt(|p| p.star_etc(lambda))?;
            Ok(Some(()))
        });
        alt!(self, |p| p.star_etc(lambda));
        Ok(None)
    }

    /// The token that ends a parameter list: `)`, or `:` for a lambda.
    pub(super) fn at_params_end(&mut self, lambda: bool) -> Result<bool, super::Abort> {
        self.at_op(if lambda { Op::Colon } else { Op::RPar })
    }

    /// `slash_no_default: param_no_default+ '/' ',' | param_no_default+ '/' &')'`
    pub(super) fn slash_no_default(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            t!(p.repeat1(|p| p.param_no_default(lambda)));
            t!(p.op(Op::Slash));
            t!(p.op(Op::Comma));
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.repeat1(|p| p.param_no_default(lambda)));
            t!(p.op(Op::Slash));
            Ok(p.at_params_end(lambda)?.then_some(()))
        });
        Ok(None)
    }

    /// `slash_with_default`
    pub(super) fn slash_with_default(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            p.repeat(|p| p.param_no_default(lambda))?;
            t!(p.repeat1(|p| p.param_with_default(lambda)));
            t!(p.op(Op::Slash));
            t!(p.op(Op::Comma));
            Ok(Some(()))
        });
        alt!(self, |p| {
            p.repeat(|p| p.param_no_default(lambda))?;
            t!(p.repeat1(|p| p.param_with_default(lambda)));
            t!(p.op(Op::Slash));
            Ok(p.at_params_end(lambda)?.then_some(()))
        });
        Ok(None)
    }

    /// `star_etc`
    fn star_etc(&mut self, lambda: bool) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_star_etc(lambda));
        }
        alt!(self, |p| {
            t!(p.op(Op::Star));
            t!(p.param_no_default(lambda));
            p.repeat(|p| p.param_maybe_default(lambda))?;
            p.opt(|p| p.kwds(lambda))?;
            Ok(Some(()))
        });
        if !lambda {
            alt!(self, |p| {
                t!(p.op(Op::Star));
                t!(p.param_no_default_star_annotation());
                p.repeat(|p| p.param_maybe_default(lambda))?;
                p.opt(|p| p.kwds(lambda))?;
                Ok(Some(()))
            });
        }
        alt!(self, |p| {
            t!(p.op(Op::Star));
            t!(p.op(Op::Comma));
            t!(p.repeat1(|p| p.param_maybe_default(lambda)));
            p.opt(|p| p.kwds(lambda))?;
            Ok(Some(()))
        });
        alt!(self, |p| p.kwds(lambda));
        Ok(None)
    }

    /// `kwds: invalid_kwds | '**' param_no_default`
    fn kwds(&mut self, lambda: bool) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_kwds(lambda));
        }
        alt!(self, |p| {
            t!(p.op(Op::DoubleStar));
            p.param_no_default(lambda)
        });
        Ok(None)
    }

    /// `param_no_default: param ',' TYPE_COMMENT? | param TYPE_COMMENT? &')'`
    pub(super) fn param_no_default(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            t!(p.param(lambda));
            t!(p.op(Op::Comma));
            if !lambda {
                p.peek()?;
            }
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.param(lambda));
            Ok(p.at_params_end(lambda)?.then_some(()))
        });
        Ok(None)
    }

    /// `param_no_default_star_annotation`
    fn param_no_default_star_annotation(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.param_star_annotation());
            t!(p.op(Op::Comma));
            p.peek()?;
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.param_star_annotation());
            Ok(p.at_op(Op::RPar)?.then_some(()))
        });
        Ok(None)
    }

    /// `param_with_default: param default ',' TYPE_COMMENT? | param default TYPE_COMMENT? &')'`
    pub(super) fn param_with_default(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            t!(p.param(lambda));
            t!(p.default());
            t!(p.op(Op::Comma));
            if !lambda {
                p.peek()?;
            }
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.param(lambda));
            t!(p.default());
            Ok(p.at_params_end(lambda)?.then_some(()))
        });
        Ok(None)
    }

    /// `param_maybe_default: param default? ',' TYPE_COMMENT? | param default? TYPE_COMMENT? &')'`
    pub(super) fn param_maybe_default(&mut self, lambda: bool) -> PR<()> {
        alt!(self, |p| {
            t!(p.param(lambda));
            p.opt(|p| p.default())?;
            t!(p.op(Op::Comma));
            if !lambda {
                p.peek()?;
            }
            Ok(Some(()))
        });
        alt!(self, |p| {
            t!(p.param(lambda));
            p.opt(|p| p.default())?;
            Ok(p.at_params_end(lambda)?.then_some(()))
        });
        Ok(None)
    }

    /// `param: NAME annotation?` (`lambda_param: NAME`)
    pub(super) fn param(&mut self, lambda: bool) -> PR<()> {
        self.alt(|p| {
            t!(p.expect(Tk::Name));
            if !lambda {
                p.opt(|p| {
                    t!(p.op(Op::Colon));
                    p.expression()
                })?;
            }
            Ok(Some(()))
        })
    }

    /// `param_star_annotation: NAME ':' star_expression`
    fn param_star_annotation(&mut self) -> PR<()> {
        self.alt(|p| {
            t!(p.expect(Tk::Name));
            t!(p.op(Op::Colon));
            t!(p.star_expression());
            Ok(Some(()))
        })
    }

    /// `default: '=' expression | invalid_default`
    pub(super) fn default(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.op(Op::Equal));
            t!(p.expression());
            Ok(Some(()))
        });
        if self.invalid {
            alt!(self, |p| {
                t!(p.op(Op::Equal));
                if !(p.at_op(Op::RPar)? || p.at_op(Op::Comma)?) {
                    return Ok(None);
                }
                Err(p.raise_syntax("expected default value expression"))
            });
        }
        Ok(None)
    }

    /// `if_stmt`
    fn if_stmt(&mut self) -> PR<()> {
        self.conditional_stmt(Kw::If, "if")
    }

    /// `elif_stmt`
    fn elif_stmt(&mut self) -> PR<()> {
        self.conditional_stmt(Kw::Elif, "elif")
    }

    /// `if_stmt` and `elif_stmt`, the same rule after `keyword`:
    /// `invalid_*_stmt | kw named_expression ':' block elif_stmt
    ///  | kw named_expression ':' block [else_block]`
    fn conditional_stmt(&mut self, keyword: Kw, word: &'static str) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_if_stmt(keyword, word));
        }
        alt!(self, |p| {
            t!(p.kw(keyword));
            t!(p.named_expression());
            t!(p.op(Op::Colon));
            t!(p.block());
            p.elif_stmt()
        });
        alt!(self, |p| {
            t!(p.kw(keyword));
            t!(p.named_expression());
            t!(p.op(Op::Colon));
            t!(p.block());
            p.opt(|p| p.else_block())?;
            Ok(Some(()))
        });
        Ok(None)
    }

    /// `else_block: invalid_else_stmt | 'else' &&':' block`
    fn else_block(&mut self) -> PR<()> {
        self.keyword_block(Kw::Else, "'else' statement")
    }

    /// `while_stmt`
    fn while_stmt(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_if_stmt(Kw::While, "while"));
        }
        alt!(self, |p| {
            t!(p.kw(Kw::While));
            t!(p.named_expression());
            t!(p.op(Op::Colon));
            t!(p.block());
            p.opt(|p| p.else_block())?;
            Ok(Some(()))
        });
        Ok(None)
    }

    /// `for_stmt`
    fn for_stmt(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_for_stmt());
        }
        for with_async in [false, true] {
            let mut cut = false;
            alt!(self, |p| {
                if with_async {
                    t!(p.kw(Kw::Async));
                }
                t!(p.kw(Kw::For));
                t!(p.star_targets());
                t!(p.kw(Kw::In));
                cut = true;
                t!(p.star_expressions());
                t!(p.op(Op::Colon));
                p.peek()?;
                t!(p.block());
                p.opt(|p| p.else_block())?;
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

    /// `with_stmt`
    fn with_stmt(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_with_stmt_indent());
        }
        for with_async in [false, true] {
            alt!(self, |p| {
                if with_async {
                    t!(p.kw(Kw::Async));
                }
                t!(p.kw(Kw::With));
                t!(p.op(Op::LPar));
                t!(p.gather(Op::Comma, |p| p.with_item()));
                p.opt(|p| p.op(Op::Comma))?;
                t!(p.op(Op::RPar));
                t!(p.op(Op::Colon));
                t!(p.block());
                Ok(Some(()))
            });
            alt!(self, |p| {
                if with_async {
                    t!(p.kw(Kw::Async));
                }
                t!(p.kw(Kw::With));
                t!(p.gather(Op::Comma, |p| p.with_item()));
                t!(p.op(Op::Colon));
                p.peek()?;
                t!(p.block());
                Ok(Some(()))
            });
        }
        if self.invalid {
            alt!(self, |p| p.invalid_with_stmt());
        }
        Ok(None)
    }

    /// `with_item`
    fn with_item(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.expression());
            t!(p.kw(Kw::As));
            t!(p.star_target());
            let next = p.peek()?.kind;
            Ok(matches!(next, Tk::Op(Op::Comma | Op::RPar | Op::Colon)).then_some(()))
        });
        if self.invalid {
            alt!(self, |p| {
                t!(p.expression());
                t!(p.kw(Kw::As));
                let target = t!(p.expression());
                let next = p.peek()?.kind;
                if !matches!(next, Tk::Op(Op::Comma | Op::RPar | Op::Colon)) {
                    return Ok(None);
                }
                p.invalid_target_error(super::invalid::Targets::Star, target)
            });
        }
        alt!(self, |p| Ok(p.expression()?.map(|_| ())));
        Ok(None)
    }

    /// `try_stmt`
    fn try_stmt(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_try_stmt());
        }
        alt!(self, |p| {
            t!(p.kw(Kw::Try));
            t!(p.forced(Op::Colon, ":"));
            t!(p.block());
            t!(p.finally_block());
            Ok(Some(()))
        });
        for star in [false, true] {
            alt!(self, |p| {
                t!(p.kw(Kw::Try));
                t!(p.forced(Op::Colon, ":"));
                t!(p.block());
                if star {
                    t!(p.repeat1(|p| p.except_star_block()));
                } else {
                    t!(p.repeat1(|p| p.except_block()));
                }
                p.opt(|p| p.else_block())?;
                p.opt(|p| p.finally_block())?;
                Ok(Some(()))
            });
        }
        Ok(None)
    }

    /// `except_block`
    pub(super) fn except_block(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_except_stmt_indent());
        }
        alt!(self, |p| {
            t!(p.kw(Kw::Except));
            t!(p.expression());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            t!(p.op(Op::Colon));
            Ok(p.block()?.map(|_| ()))
        });
        alt!(self, |p| {
            t!(p.kw(Kw::Except));
            t!(p.op(Op::Colon));
            Ok(p.block()?.map(|_| ()))
        });
        if self.invalid {
            alt!(self, |p| p.invalid_except_stmt());
        }
        Ok(None)
    }

    /// `except_star_block`
    pub(super) fn except_star_block(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_except_star_stmt_indent());
        }
        alt!(self, |p| {
            t!(p.kw(Kw::Except));
            t!(p.op(Op::Star));
            t!(p.expression());
            p.opt(|p| {
                t!(p.kw(Kw::As));
                p.expect(Tk::Name)
            })?;
            t!(p.op(Op::Colon));
            Ok(p.block()?.map(|_| ()))
        });
        if self.invalid {
            alt!(self, |p| p.invalid_except_stmt());
        }
        Ok(None)
    }

    /// `finally_block: invalid_finally_stmt | 'finally' &&':' block`
    fn finally_block(&mut self) -> PR<()> {
        self.keyword_block(Kw::Finally, "'finally' statement")
    }

    /// `else_block` and `finally_block`, the same rule after `keyword`:
    /// `invalid_*_stmt | keyword &&':' block`, where the invalid form is the
    /// keyword and `:` without an indented block (`what` names it).
    fn keyword_block(&mut self, keyword: Kw, what: &'static str) -> PR<()> {
        if self.invalid {
            alt!(self, |p| {
                let token = t!(p.kw(keyword));
                t!(p.op(Op::Colon));
                p.missing_block(token, what)
            });
        }
        alt!(self, |p| {
            t!(p.kw(keyword));
            t!(p.forced(Op::Colon, ":"));
            Ok(p.block()?.map(|_| ()))
        });
        Ok(None)
    }

    /// `match_stmt`
    fn match_stmt(&mut self) -> PR<()> {
        alt!(self, |p| {
            t!(p.soft(b"match"));
            t!(p.subject_expr());
            t!(p.op(Op::Colon));
            t!(p.expect(Tk::Newline));
            t!(p.expect(Tk::Indent));
            t!(p.repeat1(|p| p.case_block()));
            t!(p.expect(Tk::Dedent));
            Ok(Some(()))
        });
        if self.invalid {
            alt!(self, |p| p.invalid_match_stmt());
        }
        Ok(None)
    }

    /// `subject_expr: star_named_expression ',' star_named_expressions? | named_expression`
    pub(super) fn subject_expr(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.star_named_expression());
            t!(p.op(Op::Comma));
            p.opt(|p| p.star_named_expressions())?;
            Ok(Some(p.tuple(&[])))
        });
        alt!(self, |p| p.named_expression());
        Ok(None)
    }

    /// `case_block: invalid_case_block | "case" patterns guard? ':' block`
    fn case_block(&mut self) -> PR<()> {
        if self.invalid {
            alt!(self, |p| p.invalid_case_block());
        }
        alt!(self, |p| {
            t!(p.soft(b"case"));
            t!(p.patterns());
            p.opt(|p| p.guard())?;
            t!(p.op(Op::Colon));
            Ok(p.block()?.map(|_| ()))
        });
        Ok(None)
    }

    /// `guard: 'if' named_expression`
    pub(super) fn guard(&mut self) -> PR<u32> {
        self.alt(|p| {
            t!(p.kw(Kw::If));
            p.named_expression()
        })
    }

    /// `NEWLINE !INDENT` after a header: an IndentationError naming it.
    pub(super) fn missing_block(&mut self, keyword: u32, what: &str) -> PR<()> {
        t!(self.expect(Tk::Newline));
        if self.at(Tk::Indent)? {
            return Ok(None);
        }
        let line = self.tokens[keyword as usize].lineno;
        Err(self.raise(
            python_compat::ErrorClass::Indentation,
            format!("expected an indented block after {what} on line {line}"),
        ))
    }
}
