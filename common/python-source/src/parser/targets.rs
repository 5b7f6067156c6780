//! Assignment and `del` targets.

use super::{alt, t, Kind, Node, Op, Parser, Rule, Tk, PR};

impl Parser<'_> {
    /// `star_targets: star_target !',' | star_target (',' star_target)* [',']`
    pub(super) fn star_targets(&mut self) -> PR<u32> {
        alt!(self, |p| {
            let target = t!(p.star_target());
            Ok((!p.at_op(Op::Comma)?).then_some(target))
        });
        alt!(self, |p| {
            let first = t!(p.star_target());
            let mut items = vec![first];
            items.extend(p.repeat(|p| {
                t!(p.op(Op::Comma));
                p.star_target()
            })?);
            p.opt(|p| p.op(Op::Comma))?;
            Ok(Some(p.tuple(&items)))
        });
        Ok(None)
    }

    /// `star_targets_list_seq: ','.star_target+ [',']`
    fn star_targets_list_seq(&mut self) -> PR<Vec<u32>> {
        let items = t!(self.gather(Op::Comma, |p| p.star_target()));
        self.opt(|p| p.op(Op::Comma))?;
        Ok(Some(items))
    }

    /// `star_targets_tuple_seq: star_target (',' star_target)+ [','] | star_target ','`
    fn star_targets_tuple_seq(&mut self) -> PR<Vec<u32>> {
        alt!(self, |p| {
            let first = t!(p.star_target());
            let rest = t!(p.repeat1(|p| {
                t!(p.op(Op::Comma));
                p.star_target()
            }));
            p.opt(|p| p.op(Op::Comma))?;
            let mut items = vec![first];
            items.extend(rest);
            Ok(Some(items))
        });
        alt!(self, |p| {
            let first = t!(p.star_target());
            t!(p.op(Op::Comma));
            Ok(Some(vec![first]))
        });
        Ok(None)
    }

    /// `star_target (memo): '*' (!'*' star_target) | target_with_star_atom`
    pub(super) fn star_target(&mut self) -> PR<u32> {
        self.nested(|p| {
            p.memo(Rule::StarTarget, |p| {
                alt!(p, |p| {
                    t!(p.op(Op::Star));
                    if p.at_op(Op::Star)? {
                        return Ok(None);
                    }
                    let target = t!(p.star_target());
                    Ok(Some(p.node(Node::Starred(target))))
                });
                alt!(p, |p| p.target_with_star_atom());
                Ok(None)
            })
        })
    }

    /// `t_primary '.' NAME !t_lookahead | t_primary '[' slices ']' !t_lookahead`
    fn subscript_or_attribute_target(&mut self) -> PR<u32> {
        alt!(self, |p| {
            t!(p.t_primary());
            t!(p.op(Op::Dot));
            t!(p.expect(Tk::Name));
            if p.t_lookahead()? {
                return Ok(None);
            }
            Ok(Some(p.other(Kind::Attribute)))
        });
        alt!(self, |p| {
            t!(p.t_primary());
            t!(p.op(Op::LSqb));
            t!(p.slices());
            t!(p.op(Op::RSqb));
            if p.t_lookahead()? {
                return Ok(None);
            }
            Ok(Some(p.other(Kind::Subscript)))
        });
        Ok(None)
    }

    /// `target_with_star_atom (memo)`
    fn target_with_star_atom(&mut self) -> PR<u32> {
        self.memo(Rule::TargetWithStarAtom, |p| {
            alt!(p, |p| p.subscript_or_attribute_target());
            alt!(p, |p| p.star_atom());
            Ok(None)
        })
    }

    /// `star_atom`
    fn star_atom(&mut self) -> PR<u32> {
        alt!(self, |p| {
            let name = t!(p.expect(Tk::Name));
            Ok(Some(p.node(Node::Name(name))))
        });
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            let target = t!(p.target_with_star_atom());
            t!(p.op(Op::RPar));
            Ok(Some(target))
        });
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            let items = p.opt(|p| p.star_targets_tuple_seq())?.unwrap_or_default();
            t!(p.op(Op::RPar));
            Ok(Some(p.tuple(&items)))
        });
        alt!(self, |p| {
            t!(p.op(Op::LSqb));
            let items = p.opt(|p| p.star_targets_list_seq())?.unwrap_or_default();
            t!(p.op(Op::RSqb));
            Ok(Some(p.list(&items)))
        });
        Ok(None)
    }

    /// `single_target: single_subscript_attribute_target | NAME | '(' single_target ')'`
    pub(super) fn single_target(&mut self) -> PR<u32> {
        alt!(self, |p| p.single_subscript_attribute_target());
        alt!(self, |p| {
            let name = t!(p.expect(Tk::Name));
            Ok(Some(p.node(Node::Name(name))))
        });
        alt!(self, |p| {
            t!(p.op(Op::LPar));
            let target = t!(p.single_target());
            t!(p.op(Op::RPar));
            Ok(Some(target))
        });
        Ok(None)
    }

    /// `single_subscript_attribute_target`
    pub(super) fn single_subscript_attribute_target(&mut self) -> PR<u32> {
        self.subscript_or_attribute_target()
    }

    /// `t_primary`: a primary followed by `(`, `[` or `.` (left-recursive).
    fn t_primary(&mut self) -> PR<u32> {
        self.memo(Rule::TPrimary, |p| {
            let mut node = t!(p.alt(|p| {
                let atom = t!(p.atom());
                Ok(p.t_lookahead()?.then_some(atom))
            }));
            loop {
                let attribute = p.alt(|p| {
                    t!(p.op(Op::Dot));
                    t!(p.expect(Tk::Name));
                    Ok(p.t_lookahead()?.then_some(()))
                })?;
                if attribute.is_some() {
                    node = p.other(Kind::Attribute);
                    continue;
                }
                let subscript = p.alt(|p| {
                    t!(p.op(Op::LSqb));
                    t!(p.slices());
                    t!(p.op(Op::RSqb));
                    Ok(p.t_lookahead()?.then_some(()))
                })?;
                if subscript.is_some() {
                    node = p.other(Kind::Subscript);
                    continue;
                }
                let generator = p.alt(|p| {
                    t!(p.genexp());
                    Ok(p.t_lookahead()?.then_some(()))
                })?;
                if generator.is_some() {
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
                    Ok(p.t_lookahead()?.then_some(arguments))
                })?;
                if let Some(arguments) = call {
                    node = p.call_node(arguments);
                    continue;
                }
                break;
            }
            Ok(Some(node))
        })
    }

    /// `t_lookahead: '(' | '[' | '.'`
    fn t_lookahead(&mut self) -> Result<bool, super::Abort> {
        Ok(matches!(
            self.peek()?.kind,
            Tk::Op(Op::LPar | Op::LSqb | Op::Dot)
        ))
    }

    /// `del_targets: ','.del_target+ [',']`
    pub(super) fn del_targets(&mut self) -> PR<Vec<u32>> {
        let items = t!(self.gather(Op::Comma, |p| p.del_target()));
        self.opt(|p| p.op(Op::Comma))?;
        Ok(Some(items))
    }

    /// `del_target (memo)`
    fn del_target(&mut self) -> PR<u32> {
        self.nested(|p| {
            p.memo(Rule::DelTarget, |p| {
                alt!(p, |p| p.subscript_or_attribute_target());
                // del_t_atom
                alt!(p, |p| {
                    let name = t!(p.expect(Tk::Name));
                    Ok(Some(p.node(Node::Name(name))))
                });
                alt!(p, |p| {
                    t!(p.op(Op::LPar));
                    let target = t!(p.del_target());
                    t!(p.op(Op::RPar));
                    Ok(Some(target))
                });
                alt!(p, |p| {
                    t!(p.op(Op::LPar));
                    let items = p.opt(|p| p.del_targets())?.unwrap_or_default();
                    t!(p.op(Op::RPar));
                    Ok(Some(p.tuple(&items)))
                });
                alt!(p, |p| {
                    t!(p.op(Op::LSqb));
                    let items = p.opt(|p| p.del_targets())?.unwrap_or_default();
                    t!(p.op(Op::RSqb));
                    Ok(Some(p.list(&items)))
                });
                Ok(None)
            })
        })
    }
}
