//! The metered jq value: jaq's JSON value plus an upper bound of its nesting depth, with
//! every operation paying into the evaluation's [`budget`](crate::expr::budget).
//!
//! jaq evaluates any type that implements its value traits; this one delegates the value
//! semantics to `jaq_json::Val` (so results are exactly jaq's) and adds the metering:
//!
//! - **work**: one unit per clone (jaq clones at every fork: `,`, `//`, `if`, variables),
//!   per element iterated, compared or built, per arithmetic step;
//! - **memory**: the bytes of every string, array and object built, checked *before* the
//!   operations whose output can outgrow their input (string repetition, big-number
//!   arithmetic, printing);
//! - **depth**: arrays and objects carry an upper bound of their nesting; building one
//!   deeper than the budget allows ends the evaluation, so no later comparison, printing or
//!   drop can recurse past the stack.
//!
//! Values enter an evaluation through [`MVal::input`] and leave through
//! [`MVal::into_inner`]; the rest of the crate only ever sees `jaq_json::Val`.

mod compare;
pub(crate) mod natives;

use super::budget;
use jaq_core::path::Opt;
use jaq_core::{Error, Exn, ValR, ValX, ops, val};
use jaq_json::{Map, Num, Rc, Val};
use std::cmp::Ordering;
use std::fmt;

/// Bytes charged per array element (the size of a value).
const ELEMENT_BYTES: u64 = 16;
/// Bytes charged per object entry (key, value, hash and index).
const ENTRY_BYTES: u64 = 48;
/// Bytes charged per string or container besides its elements.
const HEADER_BYTES: u64 = 32;
/// Depth assumed for an input value: the conversion limit of cached objects
/// ([`crate::expr::Limits`]), so inputs never need to be walked to learn it.
pub const INPUT_DEPTH: u32 = 128;
/// Largest integer (in bits) arithmetic may produce.
pub const MAX_INT_BITS: u64 = 4096;
/// Longest text a value prints as in an error message.
const DISPLAY_LIMIT: usize = 4096;

/// A jq value under metering (see the module docs).
#[derive(Debug)]
pub struct MVal {
    v: Val,
    /// Upper bound of the nesting depth: 0 for scalars, 1 + the deepest element otherwise.
    d: u32,
}

fn is_container(v: &Val) -> bool {
    matches!(v, Val::Arr(_) | Val::Obj(_))
}

impl MVal {
    /// Wraps an evaluation input (a converted object, or a variable's value).
    pub fn input(v: Val) -> MVal {
        let d = if is_container(&v) { INPUT_DEPTH } else { 0 };
        MVal { v, d }
    }

    /// The plain value.
    pub fn into_inner(self) -> Val {
        self.v
    }

    /// The plain value, borrowed.
    pub fn inner(&self) -> &Val {
        &self.v
    }

    fn scalar(v: Val) -> MVal {
        MVal { v, d: 0 }
    }

    /// A value taken from inside `self` (no deeper than `self`'s elements).
    fn child(&self, v: Val) -> MVal {
        let d = if is_container(&v) {
            self.d.saturating_sub(1).max(1)
        } else {
            0
        };
        MVal { v, d }
    }

    /// A newly built value of nesting `d`, checked against the depth budget.
    fn built(v: Val, d: u32) -> MVal {
        budget::depth(d);
        MVal { v, d }
    }

    fn str_len(&self) -> Option<usize> {
        match &self.v {
            Val::TStr(b) | Val::BStr(b) => Some(b.len()),
            _ => None,
        }
    }
}

/// Charges for a new string of `len` bytes.
fn charge_str(len: usize) {
    budget::bytes(HEADER_BYTES + len as u64);
}

/// Renders `v` as JSON into at most `limit` bytes; `None` when it does not fit.
pub(crate) fn json_text(v: &Val, limit: usize) -> Option<Vec<u8>> {
    let mut w = Capped::new(limit);
    let written = jaq_json::write::write(&mut w, &jaq_json::write::Pp::default(), 0, v);
    (written.is_ok() && !w.cut).then_some(w.buf)
}

/// The first (at most) `limit` bytes of `v` as JSON, as text.
pub(crate) fn json_prefix(v: &Val, limit: usize) -> String {
    let mut w = Capped::new(limit);
    let _ = jaq_json::write::write(&mut w, &jaq_json::write::Pp::default(), 0, v);
    let mut text = String::from_utf8_lossy(&w.buf).into_owned();
    if text.len() > limit {
        text.truncate(limit);
    }
    text
}

/// A byte sink that refuses to grow past its limit.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    cut: bool,
}

impl Capped {
    fn new(limit: usize) -> Capped {
        Capped {
            buf: Vec::new(),
            limit,
            cut: false,
        }
    }
}

impl std::io::Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = self.limit.saturating_sub(self.buf.len());
        if data.len() > room {
            self.buf.extend_from_slice(&data[..room]);
            self.cut = true;
            return Err(std::io::Error::other("limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Formats a jaq error over plain values within a bounded length.
fn plain_error(e: &jaq_core::Error<Val>) -> Error<MVal> {
    struct Bounded(String);
    impl fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            if self.0.len() + s.len() > DISPLAY_LIMIT {
                let mut cut = DISPLAY_LIMIT.saturating_sub(self.0.len());
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.0.push_str(&s[..cut]);
                self.0.push('…');
                return Err(fmt::Error);
            }
            self.0.push_str(s);
            Ok(())
        }
    }
    let mut text = Bounded(String::new());
    let _ = fmt::write(&mut text, format_args!("{e}"));
    Error::str(text.0)
}

impl Clone for MVal {
    fn clone(&self) -> Self {
        budget::work(1);
        MVal {
            v: self.v.clone(),
            d: self.d,
        }
    }
}

impl fmt::Display for MVal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = Capped::new(DISPLAY_LIMIT);
        let _ = jaq_json::write::write(&mut w, &jaq_json::write::Pp::default(), 0, &self.v);
        f.write_str(&String::from_utf8_lossy(&w.buf))?;
        if w.cut {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl From<bool> for MVal {
    fn from(b: bool) -> Self {
        budget::work(1);
        MVal::scalar(Val::from(b))
    }
}

impl From<isize> for MVal {
    fn from(i: isize) -> Self {
        budget::work(1);
        MVal::scalar(Val::from(i))
    }
}

impl From<usize> for MVal {
    fn from(i: usize) -> Self {
        budget::work(1);
        MVal::scalar(Val::from(i))
    }
}

impl From<f64> for MVal {
    fn from(f: f64) -> Self {
        budget::work(1);
        MVal::scalar(Val::from(f))
    }
}

impl From<String> for MVal {
    fn from(s: String) -> Self {
        charge_str(s.len());
        MVal::scalar(Val::from(s))
    }
}

impl From<val::Range<MVal>> for MVal {
    fn from(r: val::Range<MVal>) -> Self {
        budget::bytes(HEADER_BYTES + 2 * ENTRY_BYTES);
        let d = [&r.start, &r.end]
            .iter()
            .filter_map(|x| x.as_ref().map(|x| x.d))
            .max()
            .unwrap_or(0);
        let range = r.start.map(MVal::into_inner)..r.end.map(MVal::into_inner);
        MVal::built(Val::from(range), d + 1)
    }
}

impl FromIterator<MVal> for MVal {
    fn from_iter<T: IntoIterator<Item = MVal>>(iter: T) -> Self {
        budget::bytes(HEADER_BYTES);
        let mut d = 0;
        let items: Vec<Val> = iter
            .into_iter()
            .map(|x| {
                budget::bytes(ELEMENT_BYTES);
                d = d.max(x.d);
                x.v
            })
            .collect();
        MVal::built(Val::Arr(Rc::new(items)), d + 1)
    }
}

impl PartialEq for MVal {
    fn eq(&self, other: &Self) -> bool {
        compare::eq(&self.v, &other.v)
    }
}

impl Eq for MVal {}

impl PartialOrd for MVal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MVal {
    fn cmp(&self, other: &Self) -> Ordering {
        compare::cmp(&self.v, &other.v)
    }
}

/// Bits of an integer (0 for non-integers).
fn int_bits(n: &Num) -> u64 {
    match n {
        Num::Int(_) => 64,
        Num::BigInt(b) => b.bits(),
        Num::Float(_) | Num::Dec(_) => 0,
    }
}

/// Checks that an integer result of `bits` bits may be built.
fn check_int_bits(bits: u64) {
    budget::work(1 + bits / 64);
    if bits > MAX_INT_BITS {
        budget::fail(budget::Exceeded::Memory);
    }
}

impl MVal {
    fn num_op(l: &Num, r: &Num, bits: u64) {
        if matches!(l, Num::BigInt(_)) || matches!(r, Num::BigInt(_)) {
            check_int_bits(bits);
        } else {
            budget::work(1);
        }
    }
}

fn math(l: MVal, op: ops::Math, r: MVal) -> ValR<MVal> {
    Err(Error::math(l, op, r))
}

impl std::ops::Add for MVal {
    type Output = ValR<MVal>;
    fn add(self, rhs: Self) -> Self::Output {
        match (&self.v, &rhs.v) {
            (Val::Null, _) => return Ok(rhs),
            (_, Val::Null) => return Ok(self),
            (Val::Num(a), Val::Num(b)) => MVal::num_op(a, b, int_bits(a).max(int_bits(b)) + 1),
            (Val::TStr(a), Val::TStr(b)) | (Val::BStr(a), Val::BStr(b)) => {
                charge_str(a.len() + b.len());
            }
            (Val::Arr(a), Val::Arr(b)) => {
                // Extended in place when the left side is not shared.
                let copied = if Rc::strong_count(a) == 1 { 0 } else { a.len() };
                budget::bytes(HEADER_BYTES + ELEMENT_BYTES * (copied + b.len()) as u64);
            }
            (Val::Obj(a), Val::Obj(b)) => {
                let copied = if Rc::strong_count(a) == 1 { 0 } else { a.len() };
                budget::bytes(HEADER_BYTES + ENTRY_BYTES * (copied + b.len()) as u64);
            }
            _ => return math(self, ops::Math::Add, rhs),
        }
        let d = self.d.max(rhs.d);
        match self.v + rhs.v {
            Ok(v) => Ok(MVal::built(v, d)),
            Err(e) => Err(plain_error(&e)),
        }
    }
}

impl std::ops::Sub for MVal {
    type Output = ValR<MVal>;
    fn sub(self, rhs: Self) -> Self::Output {
        match (&self.v, &rhs.v) {
            (Val::Num(a), Val::Num(b)) => {
                MVal::num_op(a, b, int_bits(a).max(int_bits(b)) + 1);
                match self.v - rhs.v {
                    Ok(v) => Ok(MVal::scalar(v)),
                    Err(e) => Err(plain_error(&e)),
                }
            }
            (Val::Arr(a), Val::Arr(b)) => {
                // Elements of `a` not in `b`, by jq's order (as a set lookup).
                let mut remove: Vec<&Val> = b.iter().collect();
                budget::bytes(HEADER_BYTES + ELEMENT_BYTES * (a.len() + b.len()) as u64);
                remove.sort_by(|x, y| compare::cmp(x, y));
                let kept: Vec<Val> = a
                    .iter()
                    .filter(|x| remove.binary_search_by(|y| compare::cmp(y, x)).is_err())
                    .cloned()
                    .collect();
                Ok(MVal::built(Val::Arr(Rc::new(kept)), self.d.max(1)))
            }
            _ => math(self, ops::Math::Sub, rhs),
        }
    }
}

/// How many parts `sep` splits `text` into (jq's `/` on strings), at most: its bytes for
/// an empty separator (one part per character), else non-overlapping occurrences plus one.
fn split_count(text: &[u8], sep: &[u8]) -> u64 {
    if text.is_empty() {
        return 0;
    }
    if sep.is_empty() {
        return text.len() as u64;
    }
    memchr::memmem::find_iter(text, sep).count() as u64 + 1
}

/// Pays for the copy `Rc::make_mut` makes of a shared container of `len` entries of
/// `entry` bytes, before it is made.
fn pay_copy<T>(rc: &Rc<T>, len: usize, entry: u64) {
    if Rc::strong_count(rc) > 1 {
        budget::work(len as u64);
        budget::bytes(HEADER_BYTES + entry * len as u64);
    }
}

/// Deep merge of `r` into `l` (jq's `*` on objects), paying per entry.
fn merge(l: &mut Rc<Map>, r: &Map) {
    pay_copy(l, l.len(), ENTRY_BYTES);
    let l = Rc::make_mut(l);
    for (k, v) in r {
        budget::bytes(ENTRY_BYTES);
        match (l.get_mut(k), v) {
            (Some(Val::Obj(lo)), Val::Obj(ro)) => merge(lo, ro),
            (Some(slot), v) => *slot = v.clone(),
            (None, v) => {
                l.insert(k.clone(), v.clone());
            }
        }
    }
}

impl std::ops::Mul for MVal {
    type Output = ValR<MVal>;
    fn mul(self, rhs: Self) -> Self::Output {
        match (&self.v, &rhs.v) {
            (Val::Num(a), Val::Num(b)) => {
                MVal::num_op(a, b, int_bits(a) + int_bits(b));
                match self.v * rhs.v {
                    Ok(v) => Ok(MVal::scalar(v)),
                    Err(e) => Err(plain_error(&e)),
                }
            }
            (Val::TStr(_) | Val::BStr(_), Val::Num(n))
            | (Val::Num(n), Val::TStr(_) | Val::BStr(_)) => {
                let len = self.str_len().or(rhs.str_len()).unwrap_or(0) as u64;
                let times = match n {
                    Num::Int(i) => (*i).max(0) as u64,
                    Num::BigInt(b) if b.sign() == num_bigint::Sign::Plus => u64::MAX,
                    _ => 0,
                };
                let total = len.saturating_mul(times);
                if total > budget::memory_left() {
                    budget::fail(budget::Exceeded::Memory);
                }
                charge_str(total as usize);
                match self.v * rhs.v {
                    Ok(v) => Ok(MVal::scalar(v)),
                    Err(e) => Err(plain_error(&e)),
                }
            }
            (Val::Obj(_), Val::Obj(r)) => {
                let r = r.clone();
                let d = self.d.max(rhs.d);
                let Val::Obj(mut l) = self.v else {
                    return Err(Error::str("unreachable object merge"));
                };
                merge(&mut l, &r);
                Ok(MVal::built(Val::Obj(l), d))
            }
            _ => math(self, ops::Math::Mul, rhs),
        }
    }
}

impl std::ops::Div for MVal {
    type Output = ValR<MVal>;
    fn div(self, rhs: Self) -> Self::Output {
        match (&self.v, &rhs.v) {
            (Val::Num(_), Val::Num(_)) => budget::work(1),
            (Val::TStr(a), Val::TStr(sep)) | (Val::BStr(a), Val::BStr(sep)) => {
                budget::work(1 + a.len() as u64 / 16);
                // Room for the parts before they are built.
                let parts = split_count(a, sep);
                let need = HEADER_BYTES + (ELEMENT_BYTES + HEADER_BYTES) * parts;
                if need > budget::memory_left() {
                    budget::fail(budget::Exceeded::Memory);
                }
            }
            _ => return math(self, ops::Math::Div, rhs),
        }
        match self.v / rhs.v {
            Ok(v) => {
                let parts = match &v {
                    Val::Arr(a) => a.len() as u64,
                    _ => 0,
                };
                budget::bytes(HEADER_BYTES + (ELEMENT_BYTES + HEADER_BYTES) * parts);
                let d = u32::from(parts > 0 || matches!(v, Val::Arr(_)));
                Ok(MVal::built(v, d))
            }
            Err(e) => Err(plain_error(&e)),
        }
    }
}

impl std::ops::Rem for MVal {
    type Output = ValR<MVal>;
    fn rem(self, rhs: Self) -> Self::Output {
        let (Val::Num(a), Val::Num(b)) = (&self.v, &rhs.v) else {
            return math(self, ops::Math::Rem, rhs);
        };
        MVal::num_op(a, b, int_bits(a).max(int_bits(b)));
        let zero = |n: &Num| match n {
            Num::Int(0) => true,
            Num::BigInt(b) => b.bits() == 0,
            _ => false,
        };
        if is_int(&self.v) && zero(b) {
            return math(self, ops::Math::Rem, rhs);
        }
        match self.v % rhs.v {
            Ok(v) => Ok(MVal::scalar(v)),
            Err(e) => Err(plain_error(&e)),
        }
    }
}

impl std::ops::Neg for MVal {
    type Output = ValR<MVal>;
    fn neg(self) -> Self::Output {
        match &self.v {
            Val::Num(n) => {
                MVal::num_op(n, n, int_bits(n));
                match -self.v {
                    Ok(v) => Ok(MVal::scalar(v)),
                    Err(e) => Err(plain_error(&e)),
                }
            }
            _ => Err(Error::typ(self, "number")),
        }
    }
}

/// An index given as an integer: from the start (`true`) or from the end.
fn position(i: &Val) -> Option<(bool, usize)> {
    match i {
        Val::Num(Num::Int(i)) => Some((*i >= 0, i.unsigned_abs())),
        Val::Num(Num::BigInt(b)) => {
            let pos = b.sign() != num_bigint::Sign::Minus;
            usize::try_from(b.magnitude()).ok().map(|m| (pos, m))
        }
        _ => None,
    }
}

/// The absolute index `at` resolves to in a sequence of `len`, if inside it.
fn absolute(at: (bool, usize), len: usize) -> Option<usize> {
    let i = if at.0 {
        Some(at.1)
    } else {
        len.checked_sub(at.1)
    };
    i.filter(|i| *i < len)
}

fn is_int(v: &Val) -> bool {
    matches!(v, Val::Num(Num::Int(_) | Num::BigInt(_)))
}

/// `start`/`end` of a range given as an object (`.[{"start": 1}]`).
fn range_of(o: &Map) -> (Option<MVal>, Option<MVal>) {
    let get = |k: &str| {
        o.get(&Val::utf8_str(k.as_bytes().to_vec()))
            .cloned()
            .map(MVal::scalar)
    };
    (get("start"), get("end"))
}

impl MVal {
    /// `.[index]`, or `None` where jq yields null.
    fn index_opt(self, index: &MVal) -> ValR<Option<MVal>, MVal> {
        budget::work(1);
        Ok(match (&self.v, &index.v) {
            (Val::Null, _) => None,
            (Val::BStr(b), i) if is_int(i) => position(i)
                .and_then(|at| absolute(at, b.len()))
                .map(|at| MVal::scalar(Val::from(usize::from(b[at])))),
            (Val::Arr(a), i) if is_int(i) => position(i)
                .and_then(|at| absolute(at, a.len()))
                .map(|at| self.child(a[at].clone())),
            (Val::Arr(_), Val::Arr(_)) => {
                let Some(found) = compare::indices(&self.v, &index.v) else {
                    return Err(Error::index(self, index.clone()));
                };
                budget::bytes(HEADER_BYTES + ELEMENT_BYTES * found.len() as u64);
                Some(MVal::built(found.into_iter().map(Val::from).collect(), 1))
            }
            (Val::Obj(o), i) => o.get(i).cloned().map(|v| self.child(v)),
            (Val::BStr(_) | Val::TStr(_) | Val::Arr(_), Val::Obj(o)) => {
                let (start, end) = range_of(o);
                return jaq_core::ValT::range(self, start.as_ref()..end.as_ref()).map(Some);
            }
            _ => return Err(Error::index(self, index.clone())),
        })
    }

    /// Checks the bounds of a range: integers or null.
    fn range_bounds(range: &val::Range<&MVal>) -> Result<(), Error<MVal>> {
        for bound in [range.start, range.end].into_iter().flatten() {
            if !matches!(bound.v, Val::Null) && !is_int(&bound.v) {
                return Err(Error::typ(bound.clone(), "integer"));
            }
            // As jaq: a bound beyond what an index can be is an error, not the end.
            if matches!(bound.v, Val::Num(Num::BigInt(_))) {
                return Err(Error::typ(bound.clone(), "integer"));
            }
        }
        Ok(())
    }

    /// `(skip, take)` of a range over a sequence of `len`.
    fn skip_take(range: &val::Range<&MVal>, len: usize) -> (usize, usize) {
        let bound = |b: Option<&&MVal>, default: usize| match b.map(|b| &b.v) {
            None | Some(Val::Null) => default,
            Some(v) => match position(v) {
                Some((true, i)) => i.min(len),
                Some((false, i)) => len.saturating_sub(i),
                None => default,
            },
        };
        let from = bound(range.start.as_ref(), 0);
        let upto = bound(range.end.as_ref(), len);
        (from, upto.saturating_sub(from))
    }
}

/// Iterates the elements of a shared array or object lazily (one clone per element
/// taken), or moves them out when the container is not shared.
fn elements(parent: MVal, with_keys: bool) -> Result<Box<dyn Iterator<Item = (MVal, MVal)>>, MVal> {
    let d = parent.d;
    let child = move |v: Val| {
        let d = if is_container(&v) {
            d.saturating_sub(1).max(1)
        } else {
            0
        };
        MVal { v, d }
    };
    let key = child;
    Ok(match parent.v {
        Val::Arr(a) => match Rc::try_unwrap(a) {
            Ok(items) => Box::new(items.into_iter().enumerate().map(move |(i, v)| {
                budget::work(1);
                let k = if with_keys {
                    MVal::from(i as isize)
                } else {
                    key(Val::Null)
                };
                (k, child(v))
            })),
            Err(a) => Box::new((0..a.len()).map(move |i| {
                budget::work(1);
                let k = if with_keys {
                    MVal::from(i as isize)
                } else {
                    key(Val::Null)
                };
                (k, child(a[i].clone()))
            })),
        },
        Val::Obj(o) => match Rc::try_unwrap(o) {
            Ok(map) => Box::new(map.into_iter().map(move |(k, v)| {
                budget::work(1);
                (key(k), child(v))
            })),
            Err(o) => Box::new((0..o.len()).filter_map(move |i| {
                budget::work(1);
                o.get_index(i)
                    .map(|(k, v)| (key(k.clone()), child(v.clone())))
            })),
        },
        v => return Err(MVal { v, d }),
    })
}

const ITERABLE: &str = "iterable (array or object)";

impl jaq_core::ValT for MVal {
    fn from_num(n: &str) -> ValR<Self> {
        budget::work(1 + n.len() as u64 / 8);
        match Val::from_num(n) {
            Ok(v) => {
                if let Val::Num(n) = &v {
                    check_int_bits(int_bits(n));
                }
                Ok(MVal::scalar(v))
            }
            Err(e) => Err(plain_error(&e)),
        }
    }

    fn from_map<I: IntoIterator<Item = (Self, Self)>>(iter: I) -> ValR<Self> {
        budget::bytes(HEADER_BYTES);
        let mut d = 0;
        let map: Map = iter
            .into_iter()
            .map(|(k, v)| {
                budget::bytes(ENTRY_BYTES);
                d = d.max(k.d).max(v.d);
                (k.v, v.v)
            })
            .collect();
        Ok(MVal::built(Val::obj(map), d + 1))
    }

    fn key_values(self) -> Box<dyn Iterator<Item = ValR<(Self, Self), Self>>> {
        match elements(self, true) {
            Ok(items) => Box::new(items.map(Ok)),
            Err(v) => Box::new(std::iter::once(Err(Error::typ(v, ITERABLE)))),
        }
    }

    fn values(self) -> Box<dyn Iterator<Item = ValR<Self>>> {
        budget::work(1);
        match elements(self, false) {
            Ok(items) => Box::new(items.map(|(_, v)| Ok(v))),
            Err(v) => Box::new(std::iter::once(Err(Error::typ(v, ITERABLE)))),
        }
    }

    fn index(self, index: &Self) -> ValR<Self> {
        self.index_opt(index)
            .map(|o| o.unwrap_or_else(|| MVal::scalar(Val::Null)))
    }

    fn range(self, range: val::Range<&Self>) -> ValR<Self> {
        if !matches!(self.v, Val::BStr(_) | Val::TStr(_) | Val::Arr(_)) {
            return Err(Error::typ(self, "rangeable (array or string)"));
        }
        MVal::range_bounds(&range)?;
        if let Val::Arr(a) = &self.v {
            let (skip, take) = MVal::skip_take(&range, a.len());
            budget::bytes(HEADER_BYTES + ELEMENT_BYTES * take as u64);
            let items: Vec<Val> = a[skip..skip + take].to_vec();
            return Ok(MVal::built(Val::Arr(Rc::new(items)), self.d.max(1)));
        }
        budget::work(1 + self.str_len().unwrap_or(0) as u64 / 64);
        let start = range.start.map(|b| b.v.clone());
        let end = range.end.map(|b| b.v.clone());
        match jaq_core::ValT::range(self.v, start.as_ref()..end.as_ref()) {
            Ok(v) => Ok(MVal::scalar(v)),
            Err(e) => Err(plain_error(&e)),
        }
    }

    fn map_values<'a, I: Iterator<Item = ValX<'a, Self>>>(
        self,
        opt: Opt,
        f: impl Fn(Self) -> I,
    ) -> ValX<'a, Self> {
        match &self.v {
            Val::Arr(_) => {
                let Ok(items) = elements(self, false) else {
                    return Err(Exn::from(Error::str("unreachable")));
                };
                let mut out = Vec::new();
                for (_, x) in items {
                    for y in f(x) {
                        out.push(y?);
                    }
                }
                Ok(out.into_iter().collect())
            }
            Val::Obj(_) => {
                let Ok(items) = elements(self, true) else {
                    return Err(Exn::from(Error::str("unreachable")));
                };
                let mut out = Vec::new();
                for (k, v) in items {
                    if let Some(y) = f(v).next() {
                        out.push((k, y?));
                    }
                }
                Ok(MVal::from_map(out)?)
            }
            _ => opt.fail(self, |v| Exn::from(Error::typ(v, ITERABLE))),
        }
    }

    fn map_index<'a, I: Iterator<Item = ValX<'a, Self>>>(
        self,
        index: &Self,
        opt: Opt,
        f: impl Fn(Self) -> I,
    ) -> ValX<'a, Self> {
        budget::work(1);
        if let (Val::BStr(_) | Val::TStr(_) | Val::Arr(_), Val::Obj(o)) = (&self.v, &index.v) {
            let (start, end) = range_of(o);
            return self.map_range(start.as_ref()..end.as_ref(), opt, f);
        }
        let d = self.d;
        match self.v {
            Val::Obj(mut o) => {
                budget::work(o.len() as u64 / 16);
                budget::bytes(HEADER_BYTES + ENTRY_BYTES * o.len() as u64);
                let map = Rc::make_mut(&mut o);
                let old = map.get(&index.v).cloned();
                let present = old.is_some();
                let input = old.map_or(MVal::scalar(Val::Null), |v| MVal { v, d }.child_of(d));
                match f(input).next().transpose()? {
                    Some(y) => {
                        let nd = d.max(y.d + 1);
                        map.insert(index.v.clone(), y.v);
                        Ok(MVal::built(Val::Obj(o), nd))
                    }
                    None => {
                        if present {
                            map.swap_remove(&index.v);
                        }
                        Ok(MVal { v: Val::Obj(o), d })
                    }
                }
            }
            Val::Arr(mut a) => {
                let Some(i) = position(&index.v).and_then(|at| absolute(at, a.len())) else {
                    let e = Error::str(format!("index {index} out of bounds"));
                    return opt.fail(MVal { v: Val::Arr(a), d }, |_| Exn::from(e));
                };
                budget::work(a.len() as u64 / 16);
                budget::bytes(HEADER_BYTES + ELEMENT_BYTES * a.len() as u64);
                let items = Rc::make_mut(&mut a);
                let x = std::mem::take(&mut items[i]);
                match f(MVal { v: x, d }.child_of(d)).next().transpose()? {
                    Some(y) => {
                        let nd = d.max(y.d + 1);
                        items[i] = y.v;
                        Ok(MVal::built(Val::Arr(a), nd))
                    }
                    None => {
                        items.remove(i);
                        Ok(MVal { v: Val::Arr(a), d })
                    }
                }
            }
            v => opt.fail(MVal { v, d }, |v| Exn::from(Error::typ(v, ITERABLE))),
        }
    }

    fn map_range<'a, I: Iterator<Item = ValX<'a, Self>>>(
        self,
        range: val::Range<&Self>,
        opt: Opt,
        f: impl Fn(Self) -> I,
    ) -> ValX<'a, Self> {
        if let Err(e) = MVal::range_bounds(&range) {
            return opt.fail(self, |_| Exn::from(e));
        }
        let d = self.d;
        match self.v {
            Val::Arr(mut a) => {
                let (skip, take) = MVal::skip_take(&range, a.len());
                budget::bytes(HEADER_BYTES + ELEMENT_BYTES * a.len() as u64);
                let slice = MVal {
                    v: Val::Arr(Rc::new(a[skip..skip + take].to_vec())),
                    d,
                };
                let y = f(slice).next().transpose()?;
                let (replacement, yd) = match y {
                    None => (Vec::new(), 0),
                    Some(MVal {
                        v: Val::Arr(r),
                        d: yd,
                    }) => ((*r).clone(), yd),
                    Some(other) => return Err(Exn::from(Error::typ(other, "array"))),
                };
                Rc::make_mut(&mut a).splice(skip..skip + take, replacement);
                Ok(MVal::built(Val::Arr(a), d.max(yd)))
            }
            Val::TStr(s) => {
                let text = String::from_utf8_lossy(&s).into_owned();
                let chars: Vec<char> = text.chars().collect();
                budget::bytes(HEADER_BYTES + 4 * chars.len() as u64);
                let (skip, take) = MVal::skip_take(&range, chars.len());
                let part: String = chars[skip..skip + take].iter().collect();
                let y = f(MVal::from(part)).next().transpose()?;
                let replacement = match y {
                    None => String::new(),
                    Some(MVal {
                        v: Val::TStr(r), ..
                    }) => String::from_utf8_lossy(&r).into_owned(),
                    Some(other) => return Err(Exn::from(Error::typ(other, "string"))),
                };
                let mut out: String = chars[..skip].iter().collect();
                out.push_str(&replacement);
                out.extend(chars[skip + take..].iter());
                Ok(MVal::from(out))
            }
            v => opt.fail(MVal { v, d }, |v| Exn::from(Error::typ(v, "array"))),
        }
    }

    fn as_bool(&self) -> bool {
        !matches!(self.v, Val::Null | Val::Bool(false))
    }

    fn into_string(self) -> Self {
        match self.v {
            Val::TStr(_) => self,
            Val::BStr(b) => MVal::scalar(Val::TStr(b)),
            v => {
                let text = natives::to_json(&v);
                charge_str(text.len());
                MVal::scalar(Val::utf8_str(text))
            }
        }
    }
}

impl MVal {
    /// This value as an element of a container of depth bound `parent`.
    fn child_of(self, parent: u32) -> MVal {
        let d = if is_container(&self.v) {
            parent.saturating_sub(1).max(1)
        } else {
            0
        };
        MVal { v: self.v, d }
    }
}

impl jaq_std::ValT for MVal {
    fn into_seq<S: FromIterator<Self>>(self) -> Result<S, Self> {
        // Arrays only (as jaq's value): `sort`, `min`, `implode`, … refuse objects.
        if !matches!(self.v, Val::Arr(_)) {
            return Err(self);
        }
        match elements(self, false) {
            Ok(items) => Ok(items.map(|(_, v)| v).collect()),
            Err(v) => Err(v),
        }
    }

    fn is_int(&self) -> bool {
        jaq_std::ValT::is_int(&self.v)
    }

    fn as_isize(&self) -> Option<isize> {
        jaq_std::ValT::as_isize(&self.v)
    }

    fn as_f64(&self) -> Option<f64> {
        jaq_std::ValT::as_f64(&self.v)
    }

    fn is_utf8_str(&self) -> bool {
        matches!(self.v, Val::TStr(_))
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        match &self.v {
            Val::BStr(b) | Val::TStr(b) => Some(b),
            _ => None,
        }
    }

    fn as_sub_str(&self, sub: &[u8]) -> Self {
        budget::work(1);
        MVal::scalar(jaq_std::ValT::as_sub_str(&self.v, sub))
    }

    fn from_utf8_bytes(b: impl AsRef<[u8]> + Send + 'static) -> Self {
        charge_str(b.as_ref().len());
        MVal::scalar(<Val as jaq_std::ValT>::from_utf8_bytes(b))
    }
}
