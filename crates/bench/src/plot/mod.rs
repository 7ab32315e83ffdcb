//! Charts of an experiment's runs, as standalone SVG drawn with `plotters` (text is left to the
//! viewer, so no font library is needed).
//!
//! A chart with named x positions ([`Chart::x_names`]: workloads, operations, factor steps) is
//! drawn as bars, one group per name, side by side or stacked ([`Chart::stacked`]: the parts of a
//! whole, such as a latency breakdown); any other chart as lines with a marker per point. The
//! paper's values for the same quantity ([`Chart::paper`]) are drawn beside ours in the colour
//! of the series they match by name: hollow bars, or dashed lines with hollow markers.

mod draw;

use serde::{Deserialize, Serialize};

/// One line (or one bar per category) of a chart: a name and its points, in the given order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart: title, axis labels, our series and the paper's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Names for integer x positions (categorical axes, drawn as bars), if any.
    pub x_names: Vec<String>,
    /// The paper's values of the same quantity at the same x, each named as the series of ours
    /// it is set against (drawn in its colour).
    #[serde(default)]
    pub paper: Vec<Series>,
    /// Bars stacked rather than side by side: the series are parts of one whole.
    #[serde(default)]
    pub stacked: bool,
}

impl Chart {
    /// A chart with a numeric x axis.
    pub fn new(title: &str, x: &str, y: &str, series: Vec<Series>) -> Chart {
        Chart {
            title: title.into(),
            x_label: x.into(),
            y_label: y.into(),
            series,
            x_names: Vec::new(),
            paper: Vec::new(),
            stacked: false,
        }
    }

    /// The paper's values beside ours.
    pub fn with_paper(mut self, paper: Vec<Series>) -> Chart {
        self.paper = paper;
        self
    }

    /// Whether the chart is drawn as bars (its x positions are names).
    pub fn is_bars(&self) -> bool {
        !self.x_names.is_empty()
    }

    /// The chart as an SVG document.
    pub fn svg(&self) -> anyhow::Result<String> {
        draw::svg(self)
    }
}

/// Series from `(name, [(x, y)])` rows: the paper's values as a catalog writes them.
pub fn paper_series(rows: &[(&str, &[(f64, f64)])]) -> Vec<Series> {
    rows.iter().map(|(n, p)| Series { name: n.to_string(), points: p.to_vec() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_lines() -> Chart {
        Chart::new(
            "a < b",
            "x",
            "y",
            vec![
                Series { name: "one".into(), points: vec![(1.0, 2.0), (2.0, 3.0)] },
                Series { name: "two".into(), points: vec![(1.0, 1.0)] },
            ],
        )
    }

    /// Every series is in the legend, text is escaped, and a line chart draws a line per
    /// series with at least one point marker each.
    #[test]
    fn a_line_chart_has_every_series_and_escapes_text() {
        let svg = two_lines().svg().expect("drawn");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert!(svg.contains("a &lt; b"), "title escaped");
        assert!(svg.contains(">\none\n<") || svg.contains(">one<"), "legend names one");
        assert!(svg.contains("two"), "legend names two");
        let drawn = |colour: &str| {
            svg.lines()
                .filter(|l| {
                    l.starts_with("<polyline")
                        && l.contains(&format!("stroke=\"{colour}\" stroke-width=\"2\""))
                })
                .count()
        };
        assert_eq!((drawn("#1F77B4"), drawn("#D62728")), (2, 2), "a line and a legend swatch each");
        assert!(svg.matches("<circle").count() >= 3, "a marker per point");
    }

    /// Named x positions make bars: one per series and name with a value, plus the paper's
    /// (hollow) beside them; the names are on the axis.
    #[test]
    fn categories_are_bars_and_the_paper_stands_beside_ours() {
        let mut c = two_lines();
        c.series = vec![
            Series { name: "ours".into(), points: vec![(0.0, 2.0), (1.0, 3.0)] },
            Series { name: "theirs".into(), points: vec![(0.0, 1.0), (1.0, 1.5)] },
        ];
        c.x_names = vec!["LOAD".into(), "A".into()];
        let plain = c.svg().expect("drawn");
        let bars = |s: &str| s.matches("<rect").count();
        let with =
            c.clone().with_paper(paper_series(&[("ours", &[(0.0, 2.5)])])).svg().expect("drawn");
        assert!(plain.contains("LOAD") && plain.contains(">\nA\n<"), "{plain}");
        assert_eq!(bars(&with), bars(&plain) + 2, "one paper bar and its legend swatch");
        assert!(with.contains("paper: ours"), "the paper's series is named in the legend");
        assert!(!with.contains("NaN") && !plain.contains("NaN"));
    }

    /// Stacked bars reach the sum of their parts: the y axis covers the tallest stack.
    #[test]
    fn stacked_bars_reach_their_sum() {
        let mut c = two_lines();
        c.series = vec![
            Series { name: "index".into(), points: vec![(0.0, 30.0), (1.0, 5.0)] },
            Series { name: "data".into(), points: vec![(0.0, 40.0), (1.0, 5.0)] },
        ];
        c.x_names = vec!["PUT".into(), "GET".into()];
        c.stacked = true;
        let svg = c.svg().expect("drawn");
        assert!(svg.contains(">\n70\n<") || svg.contains(">70<"), "a tick at the stack's height");
    }

    /// A stack with a negative part reaches its highest running sum: +30 then -10 is a bar
    /// to 30 whose top part comes back down to 20, and the axis covers 30.
    #[test]
    fn a_stack_with_a_negative_part_fits_its_axis() {
        let mut c = two_lines();
        c.series = vec![
            Series { name: "up".into(), points: vec![(0.0, 30.0)] },
            Series { name: "down".into(), points: vec![(0.0, -10.0)] },
        ];
        c.x_names = vec!["one".into()];
        c.stacked = true;
        let svg = c.svg().expect("drawn");
        assert!(svg.contains(">\n30\n<") || svg.contains(">30<"), "a tick at the stack's top");
    }

    /// An empty chart, a single point, negative values and values that are not numbers draw
    /// without a panic, and nothing that is not a number reaches the SVG.
    #[test]
    fn degenerate_charts_draw() {
        for series in [
            vec![],
            vec![Series { name: "p".into(), points: vec![(3.0, 3.0)] }],
            vec![Series { name: "n".into(), points: vec![(0.0, -1.0), (1.0, 2.0)] }],
            vec![Series { name: "all below".into(), points: vec![(0.0, -3.0), (1.0, -2.0)] }],
            vec![Series {
                name: "x / 0".into(),
                points: vec![(0.0, f64::NAN), (1.0, f64::INFINITY)],
            }],
        ] {
            let mut c = two_lines();
            c.series = series;
            for bars in [false, true] {
                c.x_names = if bars { vec!["a".into(), "b".into()] } else { Vec::new() };
                let svg = c.svg().expect("drawn");
                assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
            }
        }
    }
}
