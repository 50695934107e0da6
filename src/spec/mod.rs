//! The spec: its model (serde + schemars), loading with positions, schema and meaning checks.

pub mod diag;
pub mod load;
pub mod model;
pub mod npy;
pub mod repair;
pub mod schema;
pub mod step;
pub mod sweep;
pub mod tensor;

pub use model::Spec;

use diag::{Diagnostic, Source};
use load::SpanIndex;
use repair::Repair;
use std::fmt;
use std::path::{Path, PathBuf};
use sweep::Point;

/// A spec that parsed and passed the schema, with what is needed to point at its text.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The typed spec, defaults filled in.
    pub spec: Spec,
    /// The text and its name.
    pub source: Source,
    /// Byte spans by key path.
    pub spans: SpanIndex,
    /// The directory relative paths in the spec (npy files) are resolved against.
    pub dir: PathBuf,
}

impl Loaded {
    /// Renders diagnostics against this spec's text.
    pub fn invalid(&self, diags: &[Diagnostic]) -> InvalidSpec {
        InvalidSpec::render(&self.source, &self.spans, diags)
    }
}

/// A spec with errors: the report to print (every error, rendered) and how many there are.
#[derive(Debug, Clone)]
pub struct InvalidSpec {
    /// The rendered diagnostics.
    pub report: String,
    /// How many errors.
    pub count: usize,
    /// Where the schema failed: its errors and the rest of the spec, for the meaning pass.
    pub schema: Option<SchemaFailure>,
}

/// A spec the schema refused: its errors, and the spec repaired around them where it could be
/// (see [`repair`]), for the meaning pass to add the errors of the rest.
#[derive(Debug, Clone)]
pub struct SchemaFailure {
    /// The schema's errors.
    pub diags: Vec<Diagnostic>,
    /// The repaired spec and what the repair touched.
    pub repaired: Option<Box<(Loaded, Repair)>>,
}

impl InvalidSpec {
    /// Renders diagnostics in path order with positions from `spans`.
    pub fn render(source: &Source, spans: &SpanIndex, diags: &[Diagnostic]) -> Self {
        let mut located: Vec<(std::ops::Range<usize>, &Diagnostic)> =
            diags.iter().map(|d| (spans.locate(d), d)).collect();
        located.sort_by_key(|(span, _)| span.start);
        let mut report: String = located
            .iter()
            .map(|(span, d)| source.render(d, span.clone()))
            .collect::<Vec<_>>()
            .join("\n");
        let n = diags.len();
        report.push_str(&format!(
            "\n{}: {n} error{}; nothing was run\n",
            source.name,
            if n == 1 { "" } else { "s" }
        ));
        InvalidSpec {
            report,
            count: n,
            schema: None,
        }
    }
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.report.trim_end())
    }
}

impl std::error::Error for InvalidSpec {}

/// Reads a spec file and runs the first two passes: TOML syntax, then the schema.
pub fn load_file(path: &Path) -> Result<Loaded, InvalidSpec> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| InvalidSpec {
        report: format!("{name}: cannot read the spec: {e}\n"),
        count: 1,
        schema: None,
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    load_str(&name, &text, dir)
}

/// A spec file's points, each a spec of its own: one (with no swept values) for a spec without
/// `[sweep]`.
#[derive(Debug, Clone)]
pub struct Swept {
    /// The sweep as the file writes it (None without one).
    pub sweep: Option<Sweep>,
    /// Every point with its spec, in order.
    pub points: Vec<(Point, Loaded)>,
}

/// A sweep as its file writes it.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The `[sweep]` table.
    pub table: serde_json::Value,
    /// The file's own spec, with its `[sweep]` (what a manifest records as the spec run).
    pub spec: Spec,
}

impl Swept {
    /// Whether the spec sweeps.
    pub fn is_sweep(&self) -> bool {
        self.sweep.is_some()
    }

    /// The first point's spec: what every point shares (job, runtime, output).
    pub fn first(&self) -> &Loaded {
        &self.points[0].1
    }

    /// `f` of every point's spec, or the errors of every point at once (see [`sweep::merge`]).
    pub fn per_point<T>(
        &self,
        mut f: impl FnMut(&Loaded) -> Result<T, Vec<Diagnostic>>,
    ) -> Result<Vec<T>, Vec<Diagnostic>> {
        let mut done = Vec::with_capacity(self.points.len());
        let mut errors = Vec::new();
        for (point, loaded) in &self.points {
            match f(loaded) {
                Ok(t) => done.push(t),
                Err(diags) if !self.is_sweep() => return Err(diags),
                Err(diags) => errors.push((point, diags)),
            }
        }
        match errors.is_empty() {
            true => Ok(done),
            false => {
                let spans = &self.first().spans;
                Err(sweep::merge(errors, self.points.len(), spans))
            }
        }
    }
}

/// Reads a spec file and runs the syntax and schema passes over each of its points. Where some
/// points fail the schema, `meaning` (the meaning pass) runs over the others, so that the report
/// has every point's errors at once.
pub fn load_swept(
    path: &Path,
    meaning: impl Fn(&Loaded) -> Result<(), Vec<Diagnostic>>,
) -> Result<Swept, InvalidSpec> {
    let base = load_file(path)?;
    if base.spec.sweep.is_none() {
        let point = Point {
            index: 0,
            values: Default::default(),
        };
        return Ok(Swept {
            sweep: None,
            points: vec![(point, base)],
        });
    }
    let Ok(load::Parsed { mut value, .. }) = load::parse(&base.source.text) else {
        unreachable!("a loaded spec parses")
    };
    let table = value
        .as_object_mut()
        .and_then(|m| m.remove("sweep"))
        .unwrap_or_default();
    let written_at = |key: &str| {
        let entry = Diagnostic::key(sweep::entry_path(key), "");
        base.spans.locate(&entry).start
    };
    let points = sweep::points(&table, &value, written_at).map_err(|d| base.invalid(&d))?;
    let mut loaded = Vec::with_capacity(points.len());
    let mut errors = Vec::new();
    // Which points loaded, in order (the others' schema errors are in `errors`).
    let mut fine = Vec::with_capacity(points.len());
    for point in &points {
        let doc = sweep::apply(&value, point);
        let diags = schema::check(&doc);
        let spec = match diags.is_empty() {
            true => serde_json::from_value::<Spec>(doc)
                .map_err(|e| vec![Diagnostic::value(diag::KeyPath::root(), e.to_string())]),
            false => Err(diags),
        };
        match spec {
            Ok(spec) => {
                loaded.push(Loaded {
                    spec,
                    ..base.clone()
                });
                fine.push(point);
            }
            Err(diags) => errors.push((point, diags)),
        }
    }
    if !errors.is_empty() {
        for (point, l) in fine.into_iter().zip(&loaded) {
            if let Err(diags) = meaning(l) {
                errors.push((point, diags));
            }
        }
        errors.sort_by_key(|(point, _)| point.index);
        return Err(base.invalid(&sweep::merge(errors, points.len(), &base.spans)));
    }
    Ok(Swept {
        sweep: Some(Sweep {
            table,
            spec: base.spec,
        }),
        points: points.iter().cloned().zip(loaded).collect(),
    })
}

/// Runs the syntax and schema passes over a spec's text.
pub fn load_str(name: &str, text: &str, dir: PathBuf) -> Result<Loaded, InvalidSpec> {
    let source = Source::new(name, text);
    let load::Parsed {
        value,
        spans,
        non_finite,
    } = match load::parse(text) {
        Ok(parsed) => parsed,
        Err(diags) => return Err(InvalidSpec::render(&source, &SpanIndex::default(), &diags)),
    };
    // A non-finite literal is its own error; the schema's "not a string" there is not another.
    let mut diags = non_finite;
    let literal = |d: &Diagnostic| diags.iter().any(|n| n.path == d.path);
    let schema_diags: Vec<Diagnostic> = schema::check(&value)
        .into_iter()
        .filter(|d| !literal(d))
        .collect();
    diags.extend(schema_diags);
    diags.sort_by(|a, b| a.path.cmp(&b.path));
    if !diags.is_empty() {
        // The rest of the spec, repaired around the damage, for the meaning pass.
        let repaired = Repair::new(&value, &diags)
            .filter(|(fixed, _)| schema::check(fixed).is_empty())
            .and_then(|(fixed, r)| {
                let spec = serde_json::from_value(fixed).ok()?;
                let loaded = Loaded {
                    spec,
                    source: source.clone(),
                    spans: spans.clone(),
                    dir: dir.clone(),
                };
                Some(Box::new((loaded, r)))
            });
        let mut invalid = InvalidSpec::render(&source, &spans, &diags);
        invalid.schema = Some(SchemaFailure { diags, repaired });
        return Err(invalid);
    }
    let spec: Spec = match serde_path_to_error::deserialize(&value) {
        Ok(spec) => spec,
        Err(e) => {
            let path = diag::KeyPath::parse(&e.path().to_string());
            let d = Diagnostic::value(path, e.inner().to_string());
            return Err(InvalidSpec::render(&source, &spans, &[d]));
        }
    };
    Ok(Loaded {
        spec,
        source,
        spans,
        dir,
    })
}
