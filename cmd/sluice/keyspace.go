package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/keyspace"
)

// keyspaceFlags are the keyspace command's persistent flags.
type keyspaceFlags struct {
	agentURL string
	asJSON   bool
}

func init() {
	var f keyspaceFlags
	kc := &cobra.Command{
		Use:   "keyspace",
		Short: "Create, show and check keyspaces: partitioned databases over tenants on agents",
		Long: "A keyspace is a set of partitions — each a database in a tenant on some agent — sharing one schema, " +
			"with sharded, co-partitioned and reference tables and a partition plan of key ranges. " +
			"The agent it is created on (--agent) keeps it; its partitions' tenants run on that agent or on its configured peers.",
	}
	kc.PersistentFlags().StringVar(&f.agentURL, "agent", "", "agent API URL (default $SLUICE_AGENT or "+defaultAgentURL+")")
	kc.PersistentFlags().BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	addAgentAuthFlags(kc.PersistentFlags())
	kc.AddCommand(keyspaceCreateCmd(&f), keyspaceShowCmd(&f), keyspacePlanCmd(&f), keyspaceCheckCmd(&f), keyspaceListCmd(&f), keyspaceDeleteCmd(&f), keyspaceReconfigureCmd(&f))
	root.AddCommand(kc)
}

func keyspaceCreateCmd(f *keyspaceFlags) *cobra.Command {
	var spec, schema, plan string
	cmd := &cobra.Command{
		Use:   "create --spec FILE [--schema FILE] [--plan FILE]",
		Short: "Create a keyspace: apply its schema to every partition (all or none) and record it with plan epoch 1",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := readKeyspaceSpec(spec, schema, plan)
			if err != nil {
				return err
			}
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			ks, err = c.CreateKeyspace(cmd.Context(), ks)
			if err != nil {
				return agentErr("keyspace create", err)
			}
			if f.asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), ks)
			}
			parts := make([]string, len(ks.Partitions))
			for i, p := range ks.Partitions {
				parts[i] = fmt.Sprintf("%s (tenant %s on %s)", p.Name, p.Tenant, agentName(p.Agent))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "keyspace %s created: %d partitions %s; plan epoch %d\n", ks.Name, len(parts), strings.Join(parts, ", "), ks.Epoch)
			return nil
		},
	}
	cmd.Flags().StringVar(&spec, "spec", "", "the keyspace as JSON: name, partitions, tables, schema, plan (required)")
	cmd.Flags().StringVar(&schema, "schema", "", "SQL file applied to every partition; replaces the spec's schema")
	cmd.Flags().StringVar(&plan, "plan", "", `partition plan as JSON, {"table": {"partition": "[lo,hi)"}}; replaces the spec's plan`)
	return cmd
}

// readKeyspaceSpec reads and validates a keyspace spec, its schema and plan
// replaced by the files' when given. Every error is a usage error.
func readKeyspaceSpec(spec, schema, plan string) (*keyspace.Keyspace, error) {
	if spec == "" {
		return nil, cli.Usagef("keyspace create: --spec is required")
	}
	b, err := os.ReadFile(spec)
	if err != nil {
		return nil, cli.Usagef("keyspace create: --spec: %v", err)
	}
	var ks keyspace.Keyspace
	if err := decodeStrict(b, &ks); err != nil {
		return nil, cli.Usagef("keyspace create: --spec %s: %v", spec, err)
	}
	if schema != "" {
		s, err := os.ReadFile(schema)
		if err != nil {
			return nil, cli.Usagef("keyspace create: --schema: %v", err)
		}
		ks.Schema = string(s)
	}
	if plan != "" {
		p, err := readPlan(plan)
		if err != nil {
			return nil, cli.Usagef("keyspace create: --plan %v", err)
		}
		ks.Plan = p
	}
	if err := ks.Validate(); err != nil {
		return nil, cli.Usagef("keyspace create: %v", err)
	}
	return &ks, nil
}

// readPlan reads a plan file (PlanSpec JSON).
func readPlan(path string) (keyspace.PlanSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p keyspace.PlanSpec
	if err := decodeStrict(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return p, nil
}

// decodeStrict decodes one JSON value, refusing unknown fields.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func agentName(a string) string {
	if a == "" {
		return "this agent"
	}
	return a
}

func keyspaceShowCmd(f *keyspaceFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a keyspace: partitions, tables, plan and epoch, per-partition sizes, its reconfiguration running or last",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			ks, err := c.Keyspace(cmd.Context(), args[0])
			if err != nil {
				return agentErr("keyspace show", err)
			}
			sz, err := c.KeyspaceSizes(cmd.Context(), args[0])
			if err != nil {
				return agentErr("keyspace show", err)
			}
			var rs *client.ReshardStatus // the reconfiguration running or last, if any
			if st, err := c.ReshardStatus(cmd.Context(), args[0], false); err == nil {
				rs = &st
			}
			if f.asJSON {
				err = cli.WriteJSON(cmd.OutOrStdout(), struct {
					Keyspace *keyspace.Keyspace    `json:"keyspace"`
					Sizes    client.KeyspaceSizes  `json:"sizes"`
					Reshard  *client.ReshardStatus `json:"reshard,omitempty"`
				}{ks, sz, rs})
			} else {
				err = printKeyspace(cmd.OutOrStdout(), ks, sz)
				if err == nil && rs != nil {
					fmt.Fprintln(cmd.OutOrStdout())
					if rs.Phase == client.PhaseMoving {
						fmt.Fprintln(cmd.OutOrStdout(), reshardLine(*rs))
					}
					err = printReshard(cmd.OutOrStdout(), *rs, false)
				}
			}
			if err != nil {
				return err
			}
			for _, p := range sz.Partitions {
				if p.Error != "" {
					return fmt.Errorf("keyspace show: partition %s not measured: %s", p.Partition, p.Error)
				}
			}
			return nil
		},
	}
}

// printKeyspace renders a keyspace and its sizes.
func printKeyspace(out io.Writer, ks *keyspace.Keyspace, sz client.KeyspaceSizes) error {
	twoPC := "on"
	if ks.NoTwoPC {
		twoPC = "off (transactions across partitions refused)"
	}
	fmt.Fprintf(out, "keyspace %s  plan epoch %d  two-phase commit %s\n\n", ks.Name, ks.Epoch, twoPC)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TABLE\tKIND\tKEY")
	for _, t := range ks.Tables {
		key := "-"
		switch t.Kind {
		case keyspace.Sharded:
			key = fmt.Sprintf("%s %s", t.Column, t.Type)
		case keyspace.CoPartitioned:
			key = fmt.Sprintf("%s %s, follows %s", t.Column, t.Type, t.Root)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", t.Name, t.Kind, key)
	}
	w.Flush()
	fmt.Fprintln(out)
	printPlan(out, client.PlanRanges(ks.PlanRanges()))
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTITION\tTENANT\tAGENT\tDATABASE\tTABLE\tROWS\tSIZE")
	for _, p := range sz.Partitions {
		if p.Error != "" {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\terror: %s\t\t\n", p.Partition, p.Tenant, p.Agent, p.Database, p.Error)
			continue
		}
		for _, t := range p.Tables {
			est := ""
			if t.Estimated {
				est = "~"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s%d\t%s\n", p.Partition, p.Tenant, p.Agent, p.Database, t.Table, est, t.Rows, units.FormatBytes(float64(t.Bytes)))
		}
		fmt.Fprintf(w, "%s\t\t\t\t(all)\t%d\t%s\n", p.Partition, p.Rows, units.FormatBytes(float64(p.Bytes)))
	}
	fmt.Fprintf(w, "total\t\t\t\t\t%d\t%s\n", sz.Rows, units.FormatBytes(float64(sz.Bytes)))
	return w.Flush()
}

// printPlan renders a parsed plan, root tables in name order.
func printPlan(out io.Writer, ranges map[string][]client.PlanRange) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ROOT\tRANGE\tPARTITION")
	for _, root := range slices.Sorted(maps.Keys(ranges)) {
		for _, r := range ranges[root] {
			fmt.Fprintf(w, "%s\t%s\t%s\n", root, r.Range, r.Partition)
		}
	}
	w.Flush()
}

func keyspacePlanCmd(f *keyspaceFlags) *cobra.Command {
	var check string
	cmd := &cobra.Command{
		Use:   "plan NAME [--check FILE]",
		Short: "Print a keyspace's partition plan and epoch, or validate a proposed plan against it (nothing changes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var proposed keyspace.PlanSpec
			if check != "" {
				var err error
				if proposed, err = readPlan(check); err != nil {
					return cli.Usagef("keyspace plan: --check %v", err)
				}
			}
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if check == "" {
				ks, err := c.Keyspace(cmd.Context(), args[0])
				if err != nil {
					return agentErr("keyspace plan", err)
				}
				cur := client.PlanCheck{Keyspace: ks.Name, Epoch: ks.Epoch, NextEpoch: ks.Epoch, Plan: ks.Plan, Ranges: client.PlanRanges(ks.PlanRanges())}
				if f.asJSON {
					return cli.WriteJSON(out, cur)
				}
				fmt.Fprintf(out, "keyspace %s  plan epoch %d\n", ks.Name, ks.Epoch)
				printPlan(out, cur.Ranges)
				return nil
			}
			pc, err := c.CheckPlan(cmd.Context(), args[0], proposed)
			if err != nil {
				return agentErr("keyspace plan --check", err)
			}
			if f.asJSON {
				return cli.WriteJSON(out, pc)
			}
			fmt.Fprintf(out, "plan %s is valid for keyspace %s (epoch %d, would be %d); not applied\n", check, pc.Keyspace, pc.Epoch, pc.NextEpoch)
			printPlan(out, pc.Ranges)
			if len(pc.Moves) == 0 {
				fmt.Fprintln(out, "\nit moves no key")
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "\nROOT\tRANGE\tFROM\tTO\tTABLES")
			for _, m := range pc.Moves {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Root, m.Range, m.From, m.To, strings.Join(m.Tables, ", "))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&check, "check", "", `proposed plan as JSON, {"table": {"partition": "[lo,hi)"}}: exit 2 with the reason when it is not valid`)
	return cmd
}

func keyspaceCheckCmd(f *keyspaceFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "check NAME",
		Short: "Check that every row lives on the partition the plan names and reference tables are equal (exit 1 when not)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			ck, err := c.CheckKeyspace(cmd.Context(), args[0])
			if err != nil {
				return agentErr("keyspace check", err)
			}
			if f.asJSON {
				err = cli.WriteJSON(cmd.OutOrStdout(), ck)
			} else {
				err = printCheck(cmd.OutOrStdout(), ck)
			}
			if err != nil || ck.OK {
				return err
			}
			return fmt.Errorf("keyspace check: keyspace %s is not consistent: %s", ck.Keyspace, checkProblems(ck))
		},
	}
}

// printCheck renders a keyspace check: partitions × tables, then the
// reference tables' comparison.
func printCheck(out io.Writer, ck client.KeyspaceCheck) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTITION\tTENANT\tAGENT\tTABLE\tKIND\tRANGES\tROWS\tMISPLACED")
	for _, p := range ck.Partitions {
		if p.Error != "" {
			fmt.Fprintf(w, "%s\t%s\t%s\terror: %s\t\t\t\t\n", p.Partition, p.Tenant, p.Agent, p.Error)
			continue
		}
		for _, t := range p.Tables {
			ranges, misplaced := dash(t.Ranges), fmt.Sprint(t.Misplaced)
			if t.Kind == keyspace.Reference {
				ranges, misplaced = "(all)", "-"
			} else if t.Ranges == "" {
				ranges = "(none)"
			}
			if t.Error != "" {
				misplaced = "error: " + t.Error
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", p.Partition, p.Tenant, p.Agent, t.Table, t.Kind, ranges, t.Rows, misplaced)
		}
	}
	w.Flush()
	for _, r := range ck.Reference {
		if r.Equal {
			fmt.Fprintf(out, "reference %s: the same on every partition\n", r.Table)
		} else {
			fmt.Fprintf(out, "reference %s: DIFFERS from the first partition's on %s\n", r.Table, strings.Join(r.Differs, ", "))
		}
	}
	if ck.OK {
		fmt.Fprintf(out, "keyspace %s (plan epoch %d): every row on its partition\n", ck.Keyspace, ck.Epoch)
	}
	return nil
}

// checkProblems summarises what a failed check found, in one line.
func checkProblems(ck client.KeyspaceCheck) string {
	var p []string
	if ck.Misplaced > 0 {
		p = append(p, fmt.Sprintf("%d rows misplaced", ck.Misplaced))
	}
	for _, r := range ck.Reference {
		if !r.Equal {
			p = append(p, "reference table "+r.Table+" differs")
		}
	}
	for _, pc := range ck.Partitions {
		if pc.Error != "" {
			p = append(p, "partition "+pc.Partition+" not checked")
		}
		for _, t := range pc.Tables {
			if t.Error != "" {
				p = append(p, fmt.Sprintf("%s.%s not checked", pc.Partition, t.Table))
			}
		}
	}
	return strings.Join(p, "; ")
}

func keyspaceListCmd(f *keyspaceFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the agent's keyspaces",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			kss, err := c.Keyspaces(cmd.Context())
			if err != nil {
				return agentErr("keyspace list", err)
			}
			if f.asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), kss)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tEPOCH\tPARTITIONS\tTABLES")
			for _, ks := range kss {
				parts := make([]string, len(ks.Partitions))
				for i, p := range ks.Partitions {
					parts[i] = p.Name
				}
				tables := make([]string, len(ks.Tables))
				for i, t := range ks.Tables {
					tables[i] = t.Name
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", ks.Name, ks.Epoch, strings.Join(parts, ","), strings.Join(tables, ","))
			}
			return w.Flush()
		},
	}
}

func keyspaceDeleteCmd(f *keyspaceFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a keyspace's record; its partitions' tables and rows stay",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			ks, err := c.DeleteKeyspace(cmd.Context(), args[0])
			if err != nil {
				return agentErr("keyspace delete", err)
			}
			if f.asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), ks)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "keyspace %s deleted: its record only; the tables and rows on its %d partitions stay\n", ks.Name, len(ks.Partitions))
			return nil
		},
	}
}
