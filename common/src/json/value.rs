//! The value model: what `json.loads` returns (dict, list, str, int, float,
//! bool, None) and what `json.dumps` accepts.

use std::collections::HashMap;
use std::fmt;

/// A decoded or to-be-encoded JSON value, shaped like the Python objects the
/// seeds pass to and get from the `json` module.
///
/// Equality follows Python: `true == 1 == 1.0`, ints and floats compare
/// exactly, objects compare without regard to key order. One deliberate
/// difference: `NaN` equals `NaN`. Python's `json.loads` returns one shared NaN
/// object and container comparison checks identity first, so the parsed-versus-
/// parsed comparisons the seeds make (`json.loads(data) != expected_status`)
/// treat NaN as equal; a top-level `NaN != NaN` never occurs in the seeds.
#[derive(Debug, Clone)]
pub enum Json {
    /// `null` / `None`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer. Python ints are unbounded; the decoder refuses integers
    /// outside `i128` instead of losing them.
    Int(i128),
    /// A float, including `NaN` and the infinities Python reads and writes.
    Float(f64),
    /// A string (never holds a lone surrogate: the decoder refuses those).
    Str(String),
    /// A list.
    Array(Vec<Json>),
    /// A dict.
    Object(JsonObject),
}

impl Json {
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

    /// The integer of an int value; `None` for booleans, as the seeds'
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
    fn number(&self) -> Option<Number> {
        match self {
            Json::Bool(flag) => Some(Number::Int(i128::from(*flag))),
            Json::Int(number) => Some(Number::Int(*number)),
            Json::Float(number) => Some(Number::Float(*number)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

/// Python's exact int/float comparison: `2**53 + 1 != float(2**53)`.
fn int_equals_float(int: i128, float: f64) -> bool {
    // Every integral f64 in [-2^127, 2^127) converts to i128 without loss;
    // outside that range no i128 can be equal.
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0; // 2^127
    float.fract() == 0.0 && (-LIMIT..LIMIT).contains(&float) && float as i128 == int
}

impl PartialEq for Number {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (Number::Int(a), Number::Int(b)) => a == b,
            (Number::Float(a), Number::Float(b)) => a == b || (a.is_nan() && b.is_nan()),
            (Number::Int(a), Number::Float(b)) | (Number::Float(b), Number::Int(a)) => {
                int_equals_float(a, b)
            }
        }
    }
}

impl PartialEq for Json {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Json::Null, Json::Null) => true,
            (Json::Str(a), Json::Str(b)) => a == b,
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
#[derive(Clone, Default)]
pub struct JsonObject {
    entries: Vec<(String, Json)>,
    /// Position of each key in `entries`, so that large untrusted objects
    /// (an HTTP body may hold 1 MiB of keys) do not parse in quadratic time.
    positions: HashMap<String, usize>,
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
        self.positions.get(key).map(|&index| &self.entries[index].1)
    }

    /// The value of `key`, for editing in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        let index = *self.positions.get(key)?;
        Some(&mut self.entries[index].1)
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
            return Some(std::mem::replace(&mut self.entries[index].1, value));
        }
        self.positions.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        None
    }

    /// Removes `key` like `d.pop(key, None)`, keeping the order of the rest.
    pub fn remove(&mut self, key: &str) -> Option<Json> {
        let index = self.positions.remove(key)?;
        let (_, value) = self.entries.remove(index);
        for (later_key, _) in &self.entries[index..] {
            if let Some(position) = self.positions.get_mut(later_key) {
                *position -= 1;
            }
        }
        Some(value)
    }

    /// The members in insertion order (`d.items()`).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&String, &Json)> + '_ {
        self.into_iter()
    }

    /// The keys in insertion order (`d.keys()`).
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &String> + '_ {
        self.entries.iter().map(|(key, _)| key)
    }

    /// The values in insertion order (`d.values()`).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &Json> + '_ {
        self.entries.iter().map(|(_, value)| value)
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
            && self
                .iter()
                .all(|(key, value)| other.get(key) == Some(value))
    }
}

/// Borrowing iteration over the members in insertion order.
pub struct Members<'a>(std::slice::Iter<'a, (String, Json)>);

impl<'a> Iterator for Members<'a> {
    type Item = (&'a String, &'a Json);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(key, value)| (key, value))
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

impl IntoIterator for JsonObject {
    type Item = (String, Json);
    type IntoIter = std::vec::IntoIter<(String, Json)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
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
        $crate::JsonObject::new()
    };
    ($($key:expr => $value:expr),+ $(,)?) => {{
        let mut object = $crate::JsonObject::new();
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
