//! One table per paper: which experiments reproduce which figures, and what they run.

mod chime;
mod dolphin;
mod histore;
mod sephash;
mod testbed;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each paper's docs page shows its lines (which variant of each system its figures ran,
    /// with what options) exactly as the catalog's table has them.
    #[test]
    fn each_docs_page_names_the_variants_its_figures_ran() {
        let pages = [
            ("chime", include_str!("../../../../docs/reproduce.md")),
            ("sephash", include_str!("../../../../docs/reproduce-sephash.md")),
            ("dolphin", include_str!("../../../../docs/reproduce-dolphin.md")),
            ("histore", include_str!("../../../../docs/reproduce-histore.md")),
        ];
        for (name, page) in pages {
            let p = paper(name).unwrap();
            assert!(!p.lines.is_empty(), "{name} has no lines");
            let table = p.lines_table();
            assert!(
                page.contains(&table),
                "the {name} docs page lacks its lines table (`dmindex experiment --list \
                 --paper {name}` prints it):\n{table}"
            );
        }
    }

    #[test]
    fn specs_resolve_or_name_what_is_wrong() {
        assert_eq!(resolve("chime/ycsb", None).unwrap().len(), 1);
        assert_eq!(resolve("factors", None).unwrap()[0].1.name, "factors");
        let e = resolve("ycsb", None).err().expect("ambiguous").to_string();
        assert!(e.contains("several papers"), "{e}");
        assert_eq!(resolve("sephash/ycsb", None).unwrap()[0].0.name, "sephash");
        assert_eq!(resolve("all", Some("chime")).unwrap().len(), chime::PAPER.experiments.len());
        assert_eq!(resolve("chime/all", None).unwrap().len(), chime::PAPER.experiments.len());
        let e = resolve("chime/nope", None).err().expect("unknown").to_string();
        assert!(e.contains("unknown experiment 'nope'") && e.contains("ycsb"), "{e}");
        let e = resolve("nope/ycsb", None).err().expect("unknown").to_string();
        assert!(e.contains("unknown paper 'nope'"), "{e}");
        assert!(resolve("chime/ycsb", Some("other")).is_err());
    }
}
