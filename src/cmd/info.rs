//! `rlun info`: everything about one LUN and the session that reached it.

use serde_json::{json, Value};

use super::context::Ctx;
use super::error::CliError;
use crate::cli::ConnectOpts;
use crate::client::{ClientError, Lun, Target};
use crate::service::human_size;
use rlun_iscsi::scsi::inquiry::Tpgs;
use rlun_iscsi::scsi::vpd::{DeviceIdentification, UnitSerialNumber};

pub async fn run(ctx: &Ctx, arg: &str, as_json: bool, opts: &ConnectOpts) -> Result<(), CliError> {
    let v = match ctx.open_lun(arg, opts).await {
        Ok((target, lun)) => {
            target
                .scope(async |t: &Target| Ok::<_, CliError>(describe(t, &lun).await))
                .await?
        }
        // `rlun ls` lists it with its URL: say what it is instead of failing.
        Err(CliError::Client(ClientError::NotADisk {
            lun,
            device_type,
            vendor,
            product,
        })) => {
            let (url, _) = ctx.resolve_target_url(arg)?;
            json!({
                "lun": lun,
                "target": url.target,
                "portal": url.portal.to_string(),
                "disk": false,
                "inquiry": {
                    "vendor": vendor,
                    "product": product,
                    "device_type": device_type,
                },
            })
        }
        Err(e) => return Err(e),
    };
    if as_json {
        out!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON of plain values")
        );
    } else {
        print_text(&v)?;
    }
    Ok(())
}

/// Everything about `lun` and the session of `target`, as JSON.
async fn describe(target: &Target, lun: &Lun) -> Value {
    let serial = match lun.supported_vpd.contains(&0x80) {
        true => lun
            .vpd(0x80)
            .await
            .ok()
            .and_then(|b| UnitSerialNumber::parse(&b).ok())
            .map(|s| s.serial),
        false => None,
    };
    let ids: Vec<String> = match lun.supported_vpd.contains(&0x83) {
        true => lun
            .vpd(0x83)
            .await
            .ok()
            .and_then(|b| DeviceIdentification::parse(&b).ok())
            .map(|d| d.designators.iter().map(|x| x.to_text()).collect())
            .unwrap_or_default(),
        false => Vec::new(),
    };
    let rc16 = lun.read_capacity16_data().await.ok();
    let info = target.session().info();
    let p = &info.params;
    let inq = &lun.inquiry;
    let paths = lun.route().router().map(|r| r.report());
    json!({
        "lun": lun.number(),
        "target": info.target_name,
        "portal": info.portal,
        "disk": true,
        "inquiry": {
            "vendor": inq.vendor,
            "product": inq.product,
            "revision": inq.revision,
            "device_type": inq.device_type.name(),
            "version": inq.version,
            "removable": inq.removable,
            "command_queuing": inq.cmd_que,
            "serial": serial,
            "identifiers": ids,
        },
        "capacity": {
            "blocks": lun.blocks(),
            "block_size": lun.block_size(),
            "bytes": lun.capacity_bytes(),
            "physical_block_size": rc16.as_ref().and_then(|r| r.physical_block_length()),
            "lbpme": rc16.as_ref().map(|r| r.lbpme),
            "lbprz": rc16.as_ref().map(|r| r.lbprz),
        },
        "alua": match inq.tpgs {
            Tpgs::NotSupported => "none",
            Tpgs::Implicit => "implicit",
            Tpgs::Explicit => "explicit",
            Tpgs::Both => "implicit and explicit",
        },
        "multipath": paths,
        "write_protected": lun.write_protected(),
        "dpofua": lun.dpofua(),
        "block_limits": lun.limits.as_ref().map(|l| json!({
            "max_transfer_blocks": l.max_transfer_len,
            "optimal_transfer_blocks": l.optimal_transfer_len,
            "optimal_granularity_blocks": l.optimal_transfer_granularity,
            "max_unmap_lba_count": l.max_unmap_lba_count,
            "max_unmap_descriptors": l.max_unmap_descriptor_count,
            "unmap_granularity": l.optimal_unmap_granularity,
            "unmap_alignment": l.unmap_granularity_alignment,
            "max_write_same_blocks": l.max_write_same_len,
        })),
        "provisioning": lun.provisioning.as_ref().map(|p| json!({
            "unmap": p.lbpu,
            "write_same16_unmap": p.lbpws,
            "write_same10_unmap": p.lbpws10,
            "lbprz": p.lbprz,
            "type": format!("{:?}", p.provisioning_type),
        })),
        "session": {
            "isid": info.isid.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "tsih": info.tsih,
            "target_alias": info.target_alias,
            "target_portal_group_tag": info.target_portal_group_tag,
            "header_digest": format!("{:?}", p.header_digest),
            "data_digest": format!("{:?}", p.data_digest),
            "max_recv_data_segment_length": p.max_recv_data_segment_length,
            "max_xmit_data_segment_length": p.max_xmit_data_segment_length,
            "max_burst_length": p.max_burst_length,
            "first_burst_length": p.first_burst_length,
            "immediate_data": p.immediate_data,
            "initial_r2t": p.initial_r2t,
            "max_outstanding_r2t": p.max_outstanding_r2t,
            "error_recovery_level": p.error_recovery_level,
            "default_time2wait": p.default_time2wait,
            "default_time2retain": p.default_time2retain,
        },
    })
}

fn print_text(v: &Value) -> Result<(), CliError> {
    let s = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let i = &v["inquiry"];
    let c = &v["capacity"];
    out!("Target:          {}", s(&v["target"]));
    out!("Portal:          {}", s(&v["portal"]));
    out!("LUN:             {}", s(&v["lun"]));
    out!("Vendor:          {}", s(&i["vendor"]));
    out!("Product:         {}", s(&i["product"]));
    out!("Revision:        {}", s(&i["revision"]));
    out!("Device type:     {}", s(&i["device_type"]));
    if v["disk"] == Value::Bool(false) {
        out!("Not a disk:      rlun reads and writes disk LUNs only");
        return Ok(());
    }
    out!("Serial:          {}", s(&i["serial"]));
    if let Some(ids) = i["identifiers"].as_array() {
        for id in ids {
            out!("Identifier:      {}", s(id));
        }
    }
    let bytes = c["bytes"].as_u64().unwrap_or(0);
    out!("Capacity:        {} ({} bytes)", human_size(bytes), bytes);
    out!("Blocks:          {}", s(&c["blocks"]));
    out!("Block size:      {}", s(&c["block_size"]));
    out!("Physical block:  {}", s(&c["physical_block_size"]));
    out!("Thin (LBPME):    {}", s(&c["lbpme"]));
    out!("ALUA (TPGS):     {}", s(&v["alua"]));
    if let Some(paths) = v["multipath"]["paths"].as_array() {
        for p in paths {
            let group = match &p["group"] {
                Value::Null => String::new(),
                g => format!(", port group {g}"),
            };
            out!(
                "Path:            {} ({}), {}{group}, {}",
                s(&p["portal"]),
                s(&p["transport"]),
                s(&p["alua_state"]),
                if p["up"] == Value::Bool(true) {
                    "up"
                } else {
                    "down"
                }
            );
        }
    }
    out!("Write protected: {}", s(&v["write_protected"]));
    out!("FUA (DPOFUA):    {}", s(&v["dpofua"]));
    if let Some(l) = v["block_limits"].as_object() {
        out!("Block limits (VPD 0xB0):");
        for (k, val) in l {
            out!("  {k:<28} {}", s(val));
        }
    }
    if let Some(p) = v["provisioning"].as_object() {
        out!("Provisioning (VPD 0xB2):");
        for (k, val) in p {
            out!("  {k:<28} {}", s(val));
        }
    }
    out!("Session:");
    if let Some(sess) = v["session"].as_object() {
        for (k, val) in sess {
            out!("  {k:<28} {}", s(val));
        }
    }
    Ok(())
}
