//! Test cases stored column by column (one column per input, one for the targets), as a
//! GPU wants them uploaded, and the reader for `cases.json`. Must never know how
//! programs use the data; it only checks that every case matches the declared inputs.

use serde_json::Value;

use super::spec::{InputType, ProblemSpec, ScalarType};

/// One scalar value per case.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// 32-bit signed ints.
    Int(Vec<i32>),
    /// 32-bit floats.
    Float(Vec<f32>),
}

impl Column {
    /// Number of cases.
    pub fn len(&self) -> usize {
        match self {
            Column::Int(v) => v.len(),
            Column::Float(v) => v.len(),
        }
    }

    /// True when there are no cases.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value of case `c` widened to f64 (exact for both types).
    pub fn as_f64(&self, c: usize) -> f64 {
        match self {
            Column::Int(v) => f64::from(v[c]),
            Column::Float(v) => f64::from(v[c]),
        }
    }

    /// Whether case `c` of `self` equals case `d` of `other`, compared as numbers.
    pub fn equals(&self, c: usize, other: &Column, d: usize) -> bool {
        match (self, other) {
            (Column::Int(a), Column::Int(b)) => a[c] == b[d],
            _ => self.as_f64(c) == other.as_f64(d),
        }
    }
}

/// The data of one declared input across all cases.
#[derive(Clone, Debug, PartialEq)]
pub enum InputColumn {
    /// One scalar per case.
    Scalar(Column),
    /// An int array per case: `max_len` ints per case, zero-padded, row after row, and
    /// each case's real length.
    IntArray {
        /// Ints per case in `data`.
        max_len: usize,
        /// `cases * max_len` ints.
        data: Vec<i32>,
        /// One length per case, each in `0..=max_len`.
        lens: Vec<i32>,
    },
}

/// All cases of a problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Cases {
    len: usize,
    inputs: Vec<InputColumn>,
    targets: Column,
}

impl Cases {
    /// Number of cases.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no cases (never, for a loaded problem).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One column per `[[inputs]]` entry, in declaration order.
    pub fn inputs(&self) -> &[InputColumn] {
        &self.inputs
    }

    /// The target of each case.
    pub fn targets(&self) -> &Column {
        &self.targets
    }

    /// At most `max` of the cases, evenly spaced (case `k·len/max`, for k = 0, 1, ...), in order;
    /// all of them when `max` is 0 or at least their number.
    pub fn strided(&self, max: usize) -> Cases {
        if max == 0 || max >= self.len {
            return self.clone();
        }
        let picked: Vec<usize> = (0..max).map(|k| k * self.len / max).collect();
        let column = |c: &Column| match c {
            Column::Int(v) => Column::Int(picked.iter().map(|&i| v[i]).collect()),
            Column::Float(v) => Column::Float(picked.iter().map(|&i| v[i]).collect()),
        };
        let inputs = self
            .inputs
            .iter()
            .map(|input| match input {
                InputColumn::Scalar(c) => InputColumn::Scalar(column(c)),
                InputColumn::IntArray { max_len, data, lens } => InputColumn::IntArray {
                    max_len: *max_len,
                    data: picked
                        .iter()
                        .flat_map(|&i| data[i * max_len..(i + 1) * max_len].iter().copied())
                        .collect(),
                    lens: picked.iter().map(|&i| lens[i]).collect(),
                },
            })
            .collect();
        Cases { len: max, inputs, targets: column(&self.targets) }
    }

    /// The int array of input `input` for case `c`, without padding.
    pub fn array(&self, input: usize, c: usize) -> Option<&[i32]> {
        match self.inputs.get(input)? {
            InputColumn::IntArray { max_len, data, lens } => {
                let start = c.checked_mul(*max_len)?;
                let len = usize::try_from(*lens.get(c)?).ok()?;
                data.get(start..start + len)
            }
            InputColumn::Scalar(_) => None,
        }
    }
}

/// What is wrong with `cases.json`; `case` is 0-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CasesIssue {
    Whole(String),
    Case { case: usize, message: String },
}

/// Reads `cases.json` against the inputs and target declared in `spec`.
pub(crate) fn parse_cases(text: &str, spec: &ProblemSpec) -> Result<Cases, CasesIssue> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| CasesIssue::Whole(format!("not valid JSON: {e}")))?;
    let Value::Array(cases) = value else {
        return Err(CasesIssue::Whole("expected a JSON array with one object per case".into()));
    };
    if cases.is_empty() {
        return Err(CasesIssue::Whole("no cases: give at least one object".into()));
    }
    // Every case's elements of an `int[]` input, zero-padded to max_len: the kernels index them
    // with a 32-bit int, and they must fit in memory.
    for i in spec.inputs.iter().filter(|i| i.ty == InputType::IntArray) {
        let elements = (cases.len() as u128) * (i.max_len.unwrap_or(0) as u128);
        if elements > i32::MAX as u128 {
            return Err(CasesIssue::Whole(format!(
                "`{}`: {} cases of max_len {} make {elements} elements, more than the {} a kernel can index",
                i.name,
                cases.len(),
                i.max_len.unwrap_or(0),
                i32::MAX
            )));
        }
        crate::limits::fits(&format!("`{}`'s elements", i.name), elements * 4).map_err(CasesIssue::Whole)?;
    }
    let mut inputs: Vec<InputColumn> = spec
        .inputs
        .iter()
        .map(|i| match i.ty {
            InputType::Int => InputColumn::Scalar(Column::Int(Vec::new())),
            InputType::Float => InputColumn::Scalar(Column::Float(Vec::new())),
            InputType::IntArray => {
                InputColumn::IntArray { max_len: i.max_len.unwrap_or(0), data: Vec::new(), lens: Vec::new() }
            }
        })
        .collect();
    let mut targets = match spec.target.ty {
        ScalarType::Int => Column::Int(Vec::new()),
        ScalarType::Float => Column::Float(Vec::new()),
    };
    for (case, v) in cases.iter().enumerate() {
        let err = |message: String| CasesIssue::Case { case, message };
        let Value::Object(obj) = v else {
            return Err(err("expected an object".into()));
        };
        for key in obj.keys() {
            if key != "target" && !spec.inputs.iter().any(|i| &i.name == key) {
                let known: Vec<&str> = spec.inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(err(format!(
                    "unknown field `{key}`: expected `target` and the inputs [{}]",
                    known.join(", ")
                )));
            }
        }
        for (spec_in, col) in spec.inputs.iter().zip(inputs.iter_mut()) {
            let name = &spec_in.name;
            let Some(v) = obj.get(name) else {
                return Err(err(format!("missing input `{name}`")));
            };
            match col {
                InputColumn::Scalar(c) => push_scalar(c, v).map_err(|m| err(format!("`{name}`: {m}")))?,
                InputColumn::IntArray { max_len, data, lens } => {
                    let Value::Array(items) = v else {
                        return Err(err(format!("`{name}`: expected an array of ints")));
                    };
                    if items.len() > *max_len {
                        return Err(err(format!(
                            "`{name}` has {} elements, more than its max_len of {max_len}",
                            items.len()
                        )));
                    }
                    for item in items {
                        data.push(int(item).map_err(|m| err(format!("`{name}`: {m}")))?);
                    }
                    data.extend(std::iter::repeat_n(0, *max_len - items.len()));
                    lens.push(items.len() as i32);
                }
            }
        }
        let Some(t) = obj.get("target") else {
            return Err(err("missing `target`".into()));
        };
        push_scalar(&mut targets, t).map_err(|m| err(format!("`target`: {m}")))?;
    }
    Ok(Cases { len: cases.len(), inputs, targets })
}

fn push_scalar(col: &mut Column, v: &Value) -> Result<(), String> {
    match col {
        Column::Int(c) => c.push(int(v)?),
        Column::Float(c) => {
            let f = v.as_f64().ok_or_else(|| format!("expected a number, found {v}"))?;
            if !(f as f32).is_finite() {
                return Err(format!("{v} is beyond the range of a float (about ±3.4e38)"));
            }
            c.push(f as f32);
        }
    }
    Ok(())
}

fn int(v: &Value) -> Result<i32, String> {
    v.as_i64()
        .and_then(|i| i32::try_from(i).ok())
        .ok_or_else(|| format!("expected an integer in the 32-bit signed range, found {v}"))
}
