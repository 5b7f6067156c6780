//! The value model: what `json.loads` returns (dict, list, str, int, float,
//! bool, None) and what `json.dumps` accepts.

use std::collections::HashMap;
use std::fmt;

/// A Python `str` that holds at least one lone surrogate (U+D800..U+DFFF):
/// its code points, in order. `json.loads` returns such strings for `\ud800`
/// escapes and for surrogates encoded in the bytes (`surrogatepass`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WideStr(Vec<u32>);

impl WideStr {
    /// The string of `points` (each at most U+10FFFF), or `None` when it holds
    /// no lone surrogate and is therefore an ordinary [`String`].
    pub fn from_code_points(points: Vec<u32>) -> Option<WideStr> {
        let surrogate = points.iter().any(|point| (0xd800..0xe000).contains(point));
        (surrogate && points.iter().all(|&point| point <= 0x10ffff)).then_some(WideStr(points))
    }

    /// The code points, lone surrogates included.
    pub fn code_points(&self) -> &[u32] {
        &self.0
    }

    /// The text with each lone surrogate replaced by U+FFFD, for messages.
    pub fn to_string_lossy(&self) -> String {
        self.0
            .iter()
            .map(|&point| char::from_u32(point).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect()
    }
}

/// A Python int outside `i128`, as its canonical decimal text (`-` for a
/// negative value, no leading zeros).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BigInt(String);

impl BigInt {
    /// The int of a JSON integer literal (`-?(0|[1-9][0-9]*)`) that does not
    /// fit `i128`; `None` for anything else.
    pub fn from_literal(literal: &str) -> Option<BigInt> {
        let digits = literal.strip_prefix('-').unwrap_or(literal);
        let canonical = !digits.is_empty()
            && digits.bytes().all(|byte| byte.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        (canonical && literal.parse::<i128>().is_err()).then(|| BigInt(literal.to_string()))
    }

    /// The decimal text, as `str(value)` prints it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Python's `value == number` for a float: only an integral float can
    /// equal an int, and then only with exactly the same value.
    fn equals_float(&self, number: f64) -> bool {
        number.is_finite() && number.fract() == 0.0 && exact_decimal(number) == self.0
    }
}

/// The exact decimal text of an integral, finite `f64` (`int(number)`).
fn exact_decimal(number: f64) -> String {
    let bits = number.abs().to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let mantissa = if exponent == 0 {
        bits & ((1 << 52) - 1)
    } else {
        (bits & ((1 << 52) - 1)) | (1 << 52)
    };
    let shift = exponent.max(1) - 1075;
    // Base-10^9 limbs, least significant first.
    let mut limbs: Vec<u64> = Vec::new();
    let mut value = if shift >= 0 {
        mantissa
    } else {
        mantissa >> -shift
    };
    while value > 0 {
        limbs.push(value % 1_000_000_000);
        value /= 1_000_000_000;
    }
    for _ in 0..shift.max(0) {
        let mut carry = 0;
        for limb in &mut limbs {
            let doubled = *limb * 2 + carry;
            *limb = doubled % 1_000_000_000;
            carry = doubled / 1_000_000_000;
        }
        if carry > 0 {
            limbs.push(carry);
        }
    }
    let mut text = match limbs.split_last() {
        None => "0".to_string(),
        Some((top, rest)) => {
            let mut text = top.to_string();
            for limb in rest.iter().rev() {
                text.push_str(&format!("{limb:09}"));
            }
            text
        }
    };
    if number < 0.0 && text != "0" {
        text.insert(0, '-');
    }
    text
}

/// A decoded or to-be-encoded JSON value, shaped like the Python objects the
/// originals pass to and get from the `json` module.
///
/// Equality follows Python: `true == 1 == 1.0`, ints and floats compare
/// exactly, objects compare without regard to key order. One deliberate
/// difference: `NaN` equals `NaN`. Python's `json.loads` returns one shared NaN
/// object and container comparison checks identity first, so the parsed-versus-
/// parsed comparisons the originals make (`json.loads(data) != expected_status`)
/// treat NaN as equal; a top-level `NaN != NaN` never occurs in the originals.
#[derive(Debug, Clone)]
pub enum Json {
    /// `null` / `None`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer within `i128` (every int the helpers compute with).
    Int(i128),
    /// An integer outside `i128`: Python's ints are unbounded, and a status
    /// row or health document may hold one the helpers must keep exactly.
    BigInt(BigInt),
    /// A float, including `NaN` and the infinities Python reads and writes.
    Float(f64),
    /// A string (valid Unicode).
    Str(String),
    /// A Python `str` holding at least one lone surrogate (`"\ud800"`), which
    /// a Rust string cannot: it is kept as code points and written back as
    /// `json.dumps` writes it. [`Json::as_str`] does not see it.
    WideStr(WideStr),
    /// A list.
    Array(Vec<Json>),
    /// A dict.
    Object(JsonObject),
}

impl Json {
    /// `type(value).__name__` of the Python value `json.loads` gives.
    pub fn python_type_name(&self) -> &'static str {
        match self {
            Json::Null => "NoneType",
            Json::Bool(_) => "bool",
            Json::Int(_) | Json::BigInt(_) => "int",
            Json::Float(_) => "float",
            Json::Str(_) | Json::WideStr(_) => "str",
            Json::Array(_) => "list",
            Json::Object(_) => "dict",
        }
    }

    /// `value[key]` with a string key, as Python evaluates it on what
    /// `json.loads` gives: a dict's member, `KeyError` (the key's `repr`) for
    /// a missing one, and `TypeError` for a list, a string or a scalar.
    pub fn subscript(&self, key: &str) -> crate::Result<&Json> {
        use crate::{ErrorClass, Exception};
        let type_error = |message: String| Exception::new(ErrorClass::Type, message);
        match self {
            Json::Object(object) => object
                .get(key)
                .ok_or_else(|| Exception::new(ErrorClass::Key, crate::repr(key))),
            Json::Array(_) => Err(type_error(
                "list indices must be integers or slices, not str".to_string(),
            )),
            Json::Str(_) | Json::WideStr(_) => Err(type_error(
                "string indices must be integers, not 'str'".to_string(),
            )),
            scalar => Err(type_error(format!(
                "'{}' object is not subscriptable",
                scalar.python_type_name()
            ))),
        }
    }

    /// The member `key` of an object (`value.get(key)` on a dict); `None` for
    /// a missing key or when the value is not an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.as_object().and_then(|object| object.get(key))
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(text) => Some(text),
            _ => None,
        }
    }

    /// The integer of an int value; `None` for booleans, as the originals'
    /// `type(x) is int` checks require.
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Json::Int(number) => Some(*number),
            _ => None,
        }
    }

    /// The flag of a boolean value (`x is True` / `x is False` checks).
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(flag) => Some(*flag),
            _ => None,
        }
    }

    /// The number of a float value (ints are not converted).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Json::Float(number) => Some(*number),
            _ => None,
        }
    }

    /// The members of an object (`isinstance(x, dict)`).
    pub fn as_object(&self) -> Option<&JsonObject> {
        match self {
            Json::Object(object) => Some(object),
            _ => None,
        }
    }

    /// The members of an object, for editing in place.
    pub fn as_object_mut(&mut self) -> Option<&mut JsonObject> {
        match self {
            Json::Object(object) => Some(object),
            _ => None,
        }
    }

    /// The items of an array (`isinstance(x, list)`).
    pub fn as_array(&self) -> Option<&Vec<Json>> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The items of an array, for editing in place.
    pub fn as_array_mut(&mut self) -> Option<&mut Vec<Json>> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// True for `null` (`x is None`).
    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    /// Booleans, ints and floats as one numeric view, because Python compares
    /// them with each other by value.
    fn number(&self) -> Option<Number<'_>> {
        match self {
            Json::Bool(flag) => Some(Number::Int(i128::from(*flag))),
            Json::Int(number) => Some(Number::Int(*number)),
            Json::BigInt(number) => Some(Number::Big(number)),
            Json::Float(number) => Some(Number::Float(*number)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
enum Number<'a> {
    Int(i128),
    Big(&'a BigInt),
    Float(f64),
}

/// Python's exact int/float comparison: `2**53 + 1 != float(2**53)`.
fn int_equals_float(int: i128, float: f64) -> bool {
    // Every integral f64 in [-2^127, 2^127) converts to i128 without loss;
    // outside that range no i128 can be equal.
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0; // 2^127
    float.fract() == 0.0 && (-LIMIT..LIMIT).contains(&float) && float as i128 == int
}

impl PartialEq for Number<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (Number::Int(a), Number::Int(b)) => a == b,
            (Number::Big(a), Number::Big(b)) => a == b,
            // A big int lies outside i128 by construction.
            (Number::Int(_), Number::Big(_)) | (Number::Big(_), Number::Int(_)) => false,
            (Number::Float(a), Number::Float(b)) => a == b || (a.is_nan() && b.is_nan()),
            (Number::Int(a), Number::Float(b)) | (Number::Float(b), Number::Int(a)) => {
                int_equals_float(a, b)
            }
            (Number::Big(a), Number::Float(b)) | (Number::Float(b), Number::Big(a)) => {
                a.equals_float(b)
            }
        }
    }
}

impl PartialEq for Json {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Json::Null, Json::Null) => true,
            (Json::Str(a), Json::Str(b)) => a == b,
            (Json::WideStr(a), Json::WideStr(b)) => a == b,
            (Json::Array(a), Json::Array(b)) => a == b,
            (Json::Object(a), Json::Object(b)) => a == b,
            _ => match (self.number(), other.number()) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
        }
    }
}

/// A JSON object with Python dict semantics: iteration in insertion order,
/// re-inserting a key replaces its value in place, and equality ignores order.
///
/// A key may be a Python string with a lone surrogate ([`WideStr`]): such a
/// key is kept exactly and written back, is never found by [`JsonObject::get`]
/// (no `&str` equals it), and iterates under its lossy text.
#[derive(Clone, Default)]
pub struct JsonObject {
    entries: Vec<Entry>,
    /// Position of each text key in `entries`, so that large untrusted
    /// objects (an HTTP body may hold 1 MiB of keys) do not parse in
    /// quadratic time.
    positions: HashMap<String, usize>,
    /// Position of each lone-surrogate key.
    wide_positions: HashMap<WideStr, usize>,
}

#[derive(Clone)]
struct Entry {
    /// The key's text (lossy for a wide key).
    key: String,
    /// The exact key when it holds a lone surrogate.
    wide: Option<WideStr>,
    value: Json,
}

/// One key of a [`JsonObject`] as the encoder sees it.
pub(crate) enum KeyRef<'a> {
    Text(&'a str),
    Wide(&'a WideStr),
}

impl KeyRef<'_> {
    /// The key's code points, which Python's `sort_keys` orders by.
    pub(crate) fn code_points(&self) -> Vec<u32> {
        match self {
            KeyRef::Text(text) => text.chars().map(u32::from).collect(),
            KeyRef::Wide(wide) => wide.code_points().to_vec(),
        }
    }
}

impl JsonObject {
    /// An empty object (`{}`).
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of members (`len(d)`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the object has no members.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key` (`d.get(key)`).
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.positions
            .get(key)
            .map(|&index| &self.entries[index].value)
    }

    /// The value of `key`, for editing in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        let index = *self.positions.get(key)?;
        Some(&mut self.entries[index].value)
    }

    /// True when `key` is present (`key in d`).
    pub fn contains_key(&self, key: &str) -> bool {
        self.positions.contains_key(key)
    }

    /// Sets `key` like `d[key] = value`: a new key goes last, an existing key
    /// keeps its position and gets the new value. Returns the replaced value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Json>) -> Option<Json> {
        let key = key.into();
        let value = value.into();
        if let Some(&index) = self.positions.get(&key) {
            return Some(std::mem::replace(&mut self.entries[index].value, value));
        }
        self.positions.insert(key.clone(), self.entries.len());
        self.entries.push(Entry {
            key,
            wide: None,
            value,
        });
        None
    }

    /// [`JsonObject::insert`] for a key with a lone surrogate.
    pub(crate) fn insert_wide(&mut self, key: WideStr, value: Json) -> Option<Json> {
        if let Some(&index) = self.wide_positions.get(&key) {
            return Some(std::mem::replace(&mut self.entries[index].value, value));
        }
        self.wide_positions.insert(key.clone(), self.entries.len());
        self.entries.push(Entry {
            key: key.to_string_lossy(),
            wide: Some(key),
            value,
        });
        None
    }

    /// Removes `key` like `d.pop(key, None)`, keeping the order of the rest.
    pub fn remove(&mut self, key: &str) -> Option<Json> {
        let index = self.positions.remove(key)?;
        let entry = self.entries.remove(index);
        for later in &self.entries[index..] {
            let position = match &later.wide {
                None => self.positions.get_mut(&later.key),
                Some(wide) => self.wide_positions.get_mut(wide),
            };
            if let Some(position) = position {
                *position -= 1;
            }
        }
        Some(entry.value)
    }

    /// The members in insertion order (`d.items()`); a lone-surrogate key
    /// appears under its lossy text.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&String, &Json)> + '_ {
        self.into_iter()
    }

    /// The keys in insertion order (`d.keys()`), lossy for lone surrogates.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &String> + '_ {
        self.entries.iter().map(|entry| &entry.key)
    }

    /// The values in insertion order (`d.values()`).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &Json> + '_ {
        self.entries.iter().map(|entry| &entry.value)
    }

    /// The exact keys and values in insertion order, for the encoder.
    pub(crate) fn exact_members(&self) -> impl Iterator<Item = (KeyRef<'_>, &Json)> + '_ {
        self.entries.iter().map(|entry| {
            let key = match &entry.wide {
                Some(wide) => KeyRef::Wide(wide),
                None => KeyRef::Text(&entry.key),
            };
            (key, &entry.value)
        })
    }
}

impl fmt::Debug for JsonObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for JsonObject {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self.entries.iter().all(|entry| {
                let index = match &entry.wide {
                    None => other.positions.get(&entry.key),
                    Some(wide) => other.wide_positions.get(wide),
                };
                index.is_some_and(|&index| other.entries[index].value == entry.value)
            })
    }
}

/// Borrowing iteration over the members in insertion order.
pub struct Members<'a>(std::slice::Iter<'a, Entry>);

impl<'a> Iterator for Members<'a> {
    type Item = (&'a String, &'a Json);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|entry| (&entry.key, &entry.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Members<'_> {}

impl<'a> IntoIterator for &'a JsonObject {
    type Item = (&'a String, &'a Json);
    type IntoIter = Members<'a>;

    fn into_iter(self) -> Self::IntoIter {
        Members(self.entries.iter())
    }
}

/// Owning iteration over the members in insertion order.
pub struct IntoMembers(std::vec::IntoIter<Entry>);

impl Iterator for IntoMembers {
    type Item = (String, Json);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|entry| (entry.key, entry.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for IntoMembers {}

impl IntoIterator for JsonObject {
    type Item = (String, Json);
    type IntoIter = IntoMembers;

    fn into_iter(self) -> Self::IntoIter {
        IntoMembers(self.entries.into_iter())
    }
}

impl<K: Into<String>, V: Into<Json>> FromIterator<(K, V)> for JsonObject {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(members: I) -> Self {
        let mut object = JsonObject::new();
        for (key, value) in members {
            object.insert(key, value);
        }
        object
    }
}

/// Builds a [`JsonObject`] in the given key order, like a Python dict literal:
/// `json_object! {"schema" => 1, "lease" => Json::Null}`. Values take anything
/// with a `From` conversion into [`Json`]; a repeated key keeps its first
/// position and its last value.
#[macro_export]
macro_rules! json_object {
    () => {
        $crate::json::JsonObject::new()
    };
    ($($key:expr => $value:expr),+ $(,)?) => {{
        let mut object = $crate::json::JsonObject::new();
        $(object.insert($key, $value);)+
        object
    }};
}

impl From<&str> for Json {
    fn from(text: &str) -> Self {
        Json::Str(text.to_owned())
    }
}

impl From<String> for Json {
    fn from(text: String) -> Self {
        Json::Str(text)
    }
}

impl From<&String> for Json {
    fn from(text: &String) -> Self {
        Json::Str(text.clone())
    }
}

impl From<bool> for Json {
    fn from(flag: bool) -> Self {
        Json::Bool(flag)
    }
}

/// Integer conversions, including `i32` so that untyped literals work.
macro_rules! from_integer {
    ($($integer:ty),+) => {$(
        impl From<$integer> for Json {
            fn from(number: $integer) -> Self {
                Json::Int(i128::from(number))
            }
        }
    )+};
}

from_integer!(i32, i64, i128, u32, u64);

impl From<usize> for Json {
    fn from(number: usize) -> Self {
        // usize is at most 64 bits on every supported target.
        Json::Int(number as i128)
    }
}

impl From<f64> for Json {
    fn from(number: f64) -> Self {
        Json::Float(number)
    }
}

impl From<JsonObject> for Json {
    fn from(object: JsonObject) -> Self {
        Json::Object(object)
    }
}

impl<T: Into<Json>> From<Vec<T>> for Json {
    fn from(items: Vec<T>) -> Self {
        Json::Array(items.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(value: Option<T>) -> Self {
        value.map_or(Json::Null, Into::into)
    }
}
