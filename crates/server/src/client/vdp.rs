//! Delivery filters: what VCL's `resp.filters` asks delivery to do to an
//! object's body (varnishd's VDPs). `esi`, `gunzip` and `range` are
//! delivery's own stages (see `req::transmit`); any other name is a filter
//! of a vmod the VCL imports (`lacquer_vmods::BodyFilter`), run in list
//! order around `gunzip`. An unknown name stops the delivery with
//! varnishd's error.

use lacquer_vmods::FilterStage;

/// The stages a `resp.filters` list turns on.
#[derive(Default)]
pub struct DeliveryPlan {
    pub esi: bool,
    pub gunzip: bool,
    pub range: bool,
    /// Vmod filters listed before `gunzip`: they see the stored bytes.
    pub before_gunzip: Vec<Box<dyn FilterStage>>,
    /// Vmod filters listed after `gunzip` (all of them without it): they
    /// see what goes to the client.
    pub after_gunzip: Vec<Box<dyn FilterStage>>,
}

impl DeliveryPlan {
    /// Reads the list; an unknown filter is varnishd's error for it.
    pub fn parse(list: &str, vmods: &lacquer_vmods::Runtime) -> Result<DeliveryPlan, String> {
        let mut plan = DeliveryPlan::default();
        for (at, name) in crate::fetch::gzip::filter_names(list) {
            match name {
                "esi" => plan.esi = true,
                "gunzip" => plan.gunzip = true,
                "range" => plan.range = true,
                other => match vmods.filter(other, true) {
                    Some(f) if plan.gunzip => plan.after_gunzip.push((f.new)()),
                    Some(f) => plan.before_gunzip.push((f.new)()),
                    None => return Err(crate::fetch::gzip::filter_not_found(list, at)),
                },
            }
        }
        Ok(plan)
    }
}

/// Passes `data` through `stages` in order (the data itself when there
/// are none).
pub fn run(stages: &mut [Box<dyn FilterStage>], data: &[u8]) -> Result<Vec<u8>, String> {
    let mut cur = data.to_vec();
    let mut out = Vec::with_capacity(cur.len());
    for s in stages.iter_mut() {
        out.clear();
        s.feed(&cur, &mut out)?;
        std::mem::swap(&mut cur, &mut out);
    }
    Ok(cur)
}

/// Ends `stages` in order: what each still had to say passes through the
/// ones after it.
pub fn finish(stages: &mut [Box<dyn FilterStage>]) -> Result<Vec<u8>, String> {
    let mut pending = Vec::new();
    for s in stages.iter_mut() {
        let mut out = Vec::new();
        if !pending.is_empty() {
            s.feed(&pending, &mut out)?;
        }
        s.finish(&mut out)?;
        pending = out;
    }
    Ok(pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Upper;
    impl FilterStage for Upper {
        fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
            out.extend(input.iter().map(u8::to_ascii_uppercase));
            Ok(())
        }
        fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
            out.extend_from_slice(b"!");
            Ok(())
        }
    }

    #[test]
    fn stages_run_in_order_and_end_through_the_rest() {
        let mut s: Vec<Box<dyn FilterStage>> = vec![Box::new(Upper), Box::new(Upper)];
        assert_eq!(run(&mut s, b"ab").unwrap(), b"AB");
        assert_eq!(finish(&mut s).unwrap(), b"!!");
        assert_eq!(run(&mut [], b"x").unwrap(), b"x");
    }
}
