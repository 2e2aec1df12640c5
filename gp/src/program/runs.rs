//! Many runs of one program over one problem's cases at different parameter values, as a fit
//! makes them: an expression's block tape ([`super::tape`]) is compiled once and its working
//! memory kept from run to run, and from fit to fit on the same thread. A plain run keeps the
//! values of its function calls (`sinf`, `powf`, ...), and a run with derivatives at the same
//! values takes them instead of calling again, as Levenberg–Marquardt runs a step's derivatives
//! once a plain run has shown it better. Each run hands its outputs (and Jacobian rows) over a
//! block of cases at a time, in case order; they are [`Program::run_params`]'s and
//! [`Program::linearize`]'s bit for bit (programs the tape does not cover walk the tree, as
//! those do).

use std::cell::RefCell;

use super::tape::{BLOCK, Memo, Stack, Tape};
use super::value::Ty;
use super::{Body, Program, RunError};
use crate::problem::{Column, Problem};

/// A program readied for many runs over `problem` ([`Program::runs`]).
pub struct Runs<'a> {
    program: &'a Program,
    problem: &'a Problem,
    max_steps: u64,
    /// The tape, with its working memory.
    tape: Option<(Tape, Stack)>,
    /// The values of the last plain run, whose calls' values the working memory keeps.
    kept_at: Option<Vec<f32>>,
    ys: Vec<f32>,
}

impl Program {
    /// Readies this program for many runs over `problem` with at most `max_steps` loop
    /// iterations per case ([`Runs`]).
    pub fn runs<'a>(&'a self, problem: &'a Problem, max_steps: u64) -> Runs<'a> {
        let tape = match &self.body {
            Body::Expression(e) => Tape::compile(self, e).map(|t| {
                let s = t.stack_from(SPARE.with(|spare| spare.borrow_mut().take()));
                (t, s)
            }),
            Body::Statements(_) => None,
        };
        Runs { program: self, problem, max_steps, tape, kept_at: None, ys: Vec::new() }
    }
}

thread_local! {
    /// The working memory of the last [`Runs`] this thread dropped, for its next one: a thread
    /// fits one program after another, and memory taken afresh for each fit is cleared by the
    /// system page by page.
    static SPARE: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

/// Working memory of more than this many f64 values (16 MiB) is not kept for the next [`Runs`].
const SPARE_LIMIT: usize = 2 << 20;

impl Drop for Runs<'_> {
    fn drop(&mut self) {
        if let Some((_, s)) = self.tape.take()
            && s.capacity() <= SPARE_LIMIT
        {
            SPARE.with(|spare| *spare.borrow_mut() = Some(s));
        }
    }
}

impl Runs<'_> {
    /// Runs the program, whose one output is a float ([`Program::differentiable`]), at `params`
    /// and hands `each` every block of cases in order: its first case and its outputs.
    pub fn outputs(&mut self, params: &[f32], mut each: impl FnMut(usize, &[f32])) -> Result<(), RunError> {
        self.run(params, false, |start, ys, _| {
            each(start, ys);
            true
        })
        .map(|_| ())
    }

    /// As [`Runs::outputs`], stopping after the first block for which `each` returns false (a
    /// fit's plain run of a trial, once the sum of squares so far shows it no better); whether
    /// every block ran. A run stopped so keeps nothing for a run with derivatives to take.
    pub fn outputs_while(
        &mut self,
        params: &[f32],
        mut each: impl FnMut(usize, &[f32]) -> bool,
    ) -> Result<bool, RunError> {
        self.run(params, false, |start, ys, _| each(start, ys))
    }

    /// As [`Runs::outputs`], with the Jacobian: `each` also gets the block's rows of d output /
    /// d `p[k]`, `params.len()` values per case one after the other.
    pub fn linearize(
        &mut self,
        params: &[f32],
        mut each: impl FnMut(usize, &[f32], &[f64]),
    ) -> Result<(), RunError> {
        self.run(params, true, |start, ys, rows| {
            each(start, ys, rows);
            true
        })
        .map(|_| ())
    }

    /// Runs every block until `each` returns false; whether every block ran.
    fn run(
        &mut self,
        params: &[f32],
        derivatives: bool,
        mut each: impl FnMut(usize, &[f32], &[f64]) -> bool,
    ) -> Result<bool, RunError> {
        let (program, problem) = (self.program, self.problem);
        program.check(problem, params)?;
        if !program.differentiable() {
            return Err(RunError::NotDifferentiable);
        }
        if let Some((tape, s)) = &mut self.tape {
            s.memo_mode = match derivatives {
                false => Memo::Keep,
                // The same values to the bit (0.0 and -0.0 are not the same here).
                true if self.kept_at.as_deref().is_some_and(|kept| same_bits(kept, params)) => Memo::Take,
                true => Memo::Off,
            };
            if !derivatives {
                self.kept_at = None;
            }
            let ys = &mut self.ys;
            let done = tape.each_block(s, problem, params, derivatives, |start, values, rows| {
                ys.clear();
                ys.extend(values.iter().map(|&v| tape.convert(v, Ty::Float) as f32));
                each(start, ys, rows)
            });
            if let Some(all) = done {
                // A run stopped early kept only some of its calls' values.
                if s.memo_mode == Memo::Keep && all {
                    self.kept_at = Some(params.to_vec());
                }
                return Ok(all);
            }
        }
        let np = if derivatives { params.len() } else { 0 };
        let (outputs, jacobian) = if derivatives {
            let at = program.linearize_tree(problem, params, self.max_steps)?;
            (at.outputs, at.jacobian)
        } else {
            match program.run_tree(problem, params, self.max_steps)?.into_iter().next() {
                Some(Column::Float(ys)) => (ys, Vec::new()),
                _ => return Err(RunError::NotDifferentiable),
            }
        };
        for (b, ys) in outputs.chunks(BLOCK).enumerate() {
            let start = b * BLOCK;
            if !each(start, ys, &jacobian[start * np..(start + ys.len()) * np]) {
                return Ok(start + ys.len() >= outputs.len());
            }
        }
        Ok(true)
    }
}

/// Whether `a` and `b` hold the same values bit for bit.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
