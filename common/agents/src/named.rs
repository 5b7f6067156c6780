//! Closed sets named by strings (service roles, activation scopes): a value
//! is parsed from its name once, and a call that takes one accepts either
//! the value or its name, parsed at the call.

use crate::error::Result;

/// A closed set whose members have names.
pub trait Named: Sized {
    /// Reads a member's name; an unknown name is the set's refusal.
    fn parse(name: &str) -> Result<Self>;
}

/// What a call accepts for a member of `T`: the member itself, or its name
/// (the black-box tests name roles and scopes as the originals do).
pub trait OrName<T> {
    /// The member, or the refusal of an unknown name.
    fn into_member(self) -> Result<T>;
}

impl<T: Named> OrName<T> for T {
    fn into_member(self) -> Result<T> {
        Ok(self)
    }
}

impl<T: Named> OrName<T> for &str {
    fn into_member(self) -> Result<T> {
        T::parse(self)
    }
}
