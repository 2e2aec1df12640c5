//! Test cases stored column by column (one column per input, one for the targets), as a
//! GPU wants them uploaded, and the readers for `cases.json` and `cases.npy`. Must never know
//! how programs use the data; it only checks that every case matches the declared inputs.

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

/// Reads `cases.npy` (NumPy's format) against the inputs and target declared in `spec`: a 2-D
/// array in C order of float64, float32, int32 or int64, one row per case, one column per
/// declared input in the order of `problem.toml`, then the target. Only scalar inputs: an
/// `int[]` input needs `cases.json`. A value is taken as `cases.json` would take the same number:
/// a float column rounds it to the nearest float and refuses what is beyond a float's range (and
/// NaN or infinity, which JSON cannot write); an int column takes only whole numbers in the
/// 32-bit signed range.
pub(crate) fn parse_cases_npy(bytes: &[u8], spec: &ProblemSpec) -> Result<Cases, CasesIssue> {
    let whole = |m: String| CasesIssue::Whole(m);
    let npy = npyz::NpyFile::new(bytes).map_err(|e| whole(format!("not a NumPy .npy file: {e}")))?;
    if let Some(i) = spec.inputs.iter().find(|i| i.ty == InputType::IntArray) {
        return Err(whole(format!(
            "`{}` is an int[] input: cases.npy holds scalar inputs only; write cases.json",
            i.name
        )));
    }
    let want = spec.inputs.len() + 1;
    let (rows, cols) = match *npy.shape() {
        [rows, cols] => (rows, cols),
        ref shape => {
            return Err(whole(format!("a 2-D array is needed (one row per case), not shape {shape:?}")));
        }
    };
    if cols != want as u64 {
        return Err(whole(format!(
            "{cols} columns, but problem.toml declares {} inputs and a target: {want} columns, the inputs in order, then the target",
            spec.inputs.len()
        )));
    }
    if rows == 0 {
        return Err(whole("no cases: give at least one row".into()));
    }
    if npy.order() != npyz::Order::C {
        return Err(whole(
            "the array is in Fortran order: save it in C order (numpy.ascontiguousarray)".into(),
        ));
    }
    let rows =
        usize::try_from(rows).map_err(|_| whole(format!("{rows} rows: more than this machine can index")))?;
    crate::limits::fits("the cases", (rows as u128) * (want as u128) * 4).map_err(whole)?;
    let dtype = npy.dtype().descr();
    let kind = dtype.trim_matches('\'').get(1..).unwrap_or_default().to_owned();
    let read = |e: std::io::Error| whole(format!("cannot read its values: {e}"));
    let values: Vec<f64> = match kind.as_str() {
        "f8" => npy.into_vec::<f64>().map_err(read)?,
        "f4" => npy.into_vec::<f32>().map_err(read)?.into_iter().map(f64::from).collect(),
        "i4" => npy.into_vec::<i32>().map_err(read)?.into_iter().map(f64::from).collect(),
        "i8" => npy.into_vec::<i64>().map_err(read)?.into_iter().map(|v| v as f64).collect(),
        _ => return Err(whole(format!("dtype {dtype}: float64, float32, int32 or int64 is needed"))),
    };
    if values.len() != rows * want {
        return Err(whole(format!("{} values for {rows} rows of {want}", values.len())));
    }
    let column = |j: usize, ty: ScalarType, name: &str| -> Result<Column, CasesIssue> {
        let at =
            |case: usize, message: String| CasesIssue::Case { case, message: format!("`{name}`: {message}") };
        let each = (0..rows).map(|case| (case, values[case * want + j]));
        match ty {
            ScalarType::Float => each
                .map(|(case, v)| {
                    let f = v as f32;
                    if f.is_finite() {
                        Ok(f)
                    } else if v.is_finite() {
                        Err(at(case, format!("{v} is beyond the range of a float (about ±3.4e38)")))
                    } else {
                        Err(at(case, format!("{v} is not a number a case can hold")))
                    }
                })
                .collect::<Result<Vec<f32>, _>>()
                .map(Column::Float),
            ScalarType::Int => each
                .map(|(case, v)| {
                    if v.fract() == 0.0 && v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX) {
                        Ok(v as i32)
                    } else {
                        Err(at(case, format!("expected an integer in the 32-bit signed range, found {v}")))
                    }
                })
                .collect::<Result<Vec<i32>, _>>()
                .map(Column::Int),
        }
    };
    let mut inputs = Vec::with_capacity(spec.inputs.len());
    for (j, i) in spec.inputs.iter().enumerate() {
        let ty = if i.ty == InputType::Int { ScalarType::Int } else { ScalarType::Float };
        inputs.push(InputColumn::Scalar(column(j, ty, &i.name)?));
    }
    let targets = column(spec.inputs.len(), spec.target.ty, "target")?;
    Ok(Cases { len: rows, inputs, targets })
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
