//! One table per paper: which experiments reproduce which figures, and what they run.
//!
//! Each paper's module is public with the configuration its figures run (item counts, sweeps,
//! the run builders that place clients and scale caches): the crate's tests
//! (`tests/suite/papers/`) check them from outside, so the catalog, which instantiates every
//! index's harness, is compiled once in a test build rather than again for unit tests.

pub mod chime;
pub mod dolphin;
pub mod histore;
pub mod sephash;
pub mod testbed;

use dmindex_bench::experiment::{Experiment, Paper};

/// Every paper whose figures `dmindex experiment` reproduces.
pub static PAPERS: &[&Paper] =
    &[&chime::PAPER, &sephash::PAPER, &dolphin::PAPER, &histore::PAPER, &testbed::PAPER];

/// The paper called `name`; the error names the known ones.
pub fn paper(name: &str) -> anyhow::Result<&'static Paper> {
    PAPERS.iter().copied().find(|p| p.name == name).ok_or_else(|| {
        let known: Vec<_> = PAPERS.iter().map(|p| p.name).collect();
        anyhow::anyhow!("unknown paper '{name}' (known: {})", known.join(", "))
    })
}

/// Resolves `PAPER/EXPERIMENT`, `PAPER/all`, a bare experiment name that one paper has, or
/// `all` (every paper), into (paper, experiment) pairs; `paper` narrows a bare name.
pub fn resolve(
    spec: &str,
    paper_flag: Option<&str>,
) -> anyhow::Result<Vec<(&'static Paper, &'static Experiment)>> {
    let (p, e) = match spec.split_once('/') {
        Some((p, e)) => (Some(p), e),
        None => (paper_flag, spec),
    };
    if let (Some(a), Some(b)) = (spec.split_once('/').map(|x| x.0), paper_flag) {
        if a != b {
            anyhow::bail!("'{spec}' names paper '{a}' but --paper says '{b}'");
        }
    }
    let papers: Vec<&Paper> = match p {
        Some(p) => vec![paper(p)?],
        None => PAPERS.to_vec(),
    };
    if e == "all" {
        return Ok(papers
            .iter()
            .flat_map(|p| p.experiments.iter().map(move |x| (*p, x)))
            .collect());
    }
    let found: Vec<_> = papers
        .iter()
        .filter_map(|p| p.experiments.iter().find(|x| x.name == e).map(|x| (*p, x)))
        .collect();
    match found.len() {
        1 => Ok(found),
        0 if papers.len() == 1 => Err(papers[0].experiment(e).err().expect("not found")),
        0 => anyhow::bail!("unknown experiment '{e}' (see --list)"),
        _ => anyhow::bail!("'{e}' is an experiment of several papers: name one as PAPER/{e}"),
    }
}
